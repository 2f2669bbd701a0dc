package lab

import (
	"context"
	"testing"

	"github.com/cnperf/cnperf/internal/ethtool"
)

// TestEnvironmentAndNICSegmentation: a lab describes itself (the
// machine, each node's underlay MTU, offloads and congestion control, a
// pod's MTU), and --underlay-segmentation nic turns TSO and GSO off on
// both ends of every node's underlay link, where the default keeps them.
func TestEnvironmentAndNICSegmentation(t *testing.T) {
	for _, seg := range []string{SegmentHost, SegmentNIC} {
		t.Run(seg, func(t *testing.T) {
			l := upLab(t, Config{Nodes: 2, PodsPerNode: 1, Backend: BackendVXLAN, UnderlaySegmentation: seg})
			env, err := l.Environment(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if env.Platform != "lab" || env.Backend != BackendVXLAN || env.UnderlaySegmentation != seg || len(env.Nodes) != 2 {
				t.Fatalf("environment %+v", env)
			}
			on := seg == SegmentHost
			for _, n := range env.Nodes {
				if n.UnderlayMTU != 1500 || n.PodMTU != 1450 || n.Kernel == "" || n.CongestionControl == "" {
					t.Errorf("node %+v", n)
				}
				if n.Offload[ethtool.TSO] != on || n.Offload[ethtool.GSO] != on {
					t.Errorf("node %s offloads %v, want tso and gso %v", n.Name, n.Offload, on)
				}
			}
			var port map[string]bool
			if err := Do(l.Underlay.NS, func() error { var err error; port, err = ethtool.Get(underlayPort(1)); return err }); err != nil {
				t.Fatal(err)
			}
			if port[ethtool.GSO] != on {
				t.Errorf("underlay port offloads %v, want gso %v", port, on)
			}
		})
	}
	if err := (Config{Name: "x", Nodes: 1, UnderlaySegmentation: "wire"}).withDefaults().Validate(); err == nil {
		t.Error("underlay segmentation \"wire\" accepted")
	}
}
