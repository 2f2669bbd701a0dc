package qospriority_test

import (
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestQoSPriorityLab: on a 1 Gbit/s bottleneck with a 2 Gbit/s flood, the
// HTB priority tree cuts the EF flow's p99 one-way latency at least 10×
// against the FIFO; pfifo_fast on the pod's veth at line rate shows no
// such cut between marked and unmarked flows.
func TestQoSPriorityLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "qos-priority", "--time", "3s",
		"--set", "variants=fifo,htb-priority,pfifo_fast", "--set", "markings=none,0x10,EF", "--set", "bottleneck-rate=1G")
	p99 := map[string]float64{}
	for _, r := range rows {
		v, ok := cnperftest.Num(r, "latency_ms.p99")
		key := r["variant"].(string) + "/" + r["marking"].(string)
		if !ok {
			t.Errorf("%s: no p99 (row %v)", key, r)
			continue
		}
		p99[key] = v
		t.Logf("%-22s p99 %8.3f ms  loss %v %%  verdict: %v", key, v, r["loss_pct"], r["verdict"])
	}
	fifo, htb := p99["fifo/EF"], p99["htb-priority/EF"]
	if htb <= 0 || fifo/htb < 10 {
		t.Errorf("htb-priority cut EF's p99 from %.3f ms (fifo) to %.3f ms: %.1f×, want at least 10×", fifo, htb, fifo/htb)
	}
	if p99["fifo/none"] < 1 {
		t.Errorf("the FIFO bottleneck built no queue: unmarked p99 %.3f ms", p99["fifo/none"])
	}
	if p99["pfifo_fast/none"] > p99["fifo/none"]/4 {
		t.Errorf("pfifo_fast at line rate: unmarked p99 %.3f ms, not far below the FIFO bottleneck's %.3f ms", p99["pfifo_fast/none"], p99["fifo/none"])
	}
	best := min(p99["pfifo_fast/TOS 0x10"], p99["pfifo_fast/EF"])
	if best <= 0 || p99["pfifo_fast/none"]/best >= 10 {
		t.Errorf("pfifo_fast at line rate: unmarked p99 %.3f ms, marked %.3f ms: a cut of %.1f× where none is expected",
			p99["pfifo_fast/none"], best, p99["pfifo_fast/none"]/best)
	}
}
