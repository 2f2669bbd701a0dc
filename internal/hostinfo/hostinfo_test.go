package hostinfo

import (
	"testing"
)

func TestMachine(t *testing.T) {
	n, err := Machine()
	if err != nil {
		t.Fatal(err)
	}
	if n.Kernel == "" || n.CPUs < 1 || n.MemoryBytes < 1<<20 {
		t.Errorf("machine = %+v", n)
	}
	t.Logf("machine: %+v", n)
}

func TestLoopbackLink(t *testing.T) {
	mtu, err := LinkMTU("lo")
	if err != nil || mtu < 1500 {
		t.Errorf("mtu of lo = %d, %v", mtu, err)
	}
	off, err := Offload("lo")
	if err != nil {
		t.Fatalf("offload of lo: %v", err)
	}
	if _, ok := off["gso"]; !ok {
		t.Errorf("offload of lo = %v, want gso", off)
	}
	if _, err := Offload("no-such-dev0"); err == nil {
		t.Error("offload of a missing device: no error")
	}
	cc, err := CongestionControl()
	if err != nil || cc == "" {
		t.Errorf("congestion control = %q, %v", cc, err)
	}
}

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
	if got := cpuModel([]byte("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n")); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
}
