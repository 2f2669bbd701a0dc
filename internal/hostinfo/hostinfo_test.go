package hostinfo

import (
	"testing"
)

func TestGet(t *testing.T) {
	e := Environment{Platform: "lab", CNI: "lab", Backend: "vxlan", Nodes: []Node{
		{Name: "a", Kernel: "6.1", CPUs: 2, Offload: map[string]bool{"tso": true, "gso": false}},
		{Name: "b", Kernel: "6.1", CPUs: 4},
	}}
	cases := []struct{ field, want string }{
		{"backend", "vxlan"}, {"kernel", "6.1"}, {"cpus", "2, 4"}, {"offload", "tso on, gso off"},
	}
	for _, c := range cases {
		if got, ok := e.Get(c.field); !ok || got != c.want {
			t.Errorf("Get(%q) = %q %v, want %q", c.field, got, ok, c.want)
		}
	}
	if _, ok := e.Get("colour"); ok {
		t.Error("unknown field accepted")
	}
}
