package hostread

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

func TestCPUModel(t *testing.T) {
	if got := cpuModel([]byte("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n")); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
}
