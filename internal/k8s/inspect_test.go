package k8s

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/qos"
)

// TestInspectLocalReadsQdiscsAsShow: the inspector reads a link's qdiscs
// through qos's reader, so a tbf reads the same in both (rate, burst,
// limit, parent).
func TestInspectLocalReadsQdiscsAsShow(t *testing.T) {
	p := nettest.NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := qos.Target{NetNS: p.A.Path(), Link: "eth0"}
	if err := qos.Apply(ctx, tg, qos.TBF{Rate: 10e6, BurstBytes: 32 * 1024}); err != nil {
		t.Fatal(err)
	}
	st, err := qos.Show(tg)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := st.Root()
	if !ok || want.Kind != "tbf" {
		t.Fatalf("qos.Show: no tbf root: %+v", st)
	}
	var r NodeReport
	err = p.A.Do(func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		r, err = InspectLocal(ctx, InspectOptions{Ifindex: ifc.Index, ProxyMetrics: "127.0.0.1:1"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Links) != 1 || r.Links[0].Name != "eth0" {
		t.Fatalf("links %+v, want eth0 alone", r.Links)
	}
	got := Qdisc{}
	for _, q := range r.Links[0].Qdiscs {
		if q.Parent == "root" {
			got = q
		}
	}
	if got.Kind != "tbf" || got.RateBps != want.RateBps || got.Burst != want.BurstBytes || got.Limit != want.LimitBytes || want.RateBps != 10e6 {
		t.Errorf("inspector's root qdisc %+v; qos.Show's %+v", got, want)
	}
}

// TestInspectLocalNamesMetadataTunnels: the inspector lists a node's
// VXLAN devices and names those in metadata mode (ip link add ... type
// vxlan external, as Cilium makes cilium_vxlan) apart from a classic one.
func TestInspectLocalNamesMetadataTunnels(t *testing.T) {
	p := nettest.NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.A.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxplain"}, VxlanId: 7, Port: 4789}); err != nil {
			return fmt.Errorf("add vxlan: %w", err)
		}
		return netlink.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxmd"}, Port: 8472, FlowBased: true})
	}); err != nil {
		t.Fatal(err)
	}
	var r NodeReport
	if err := p.A.Do(func() error {
		var err error
		r, err = InspectLocal(ctx, InspectOptions{ProxyMetrics: "127.0.0.1:1"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Tunnels, []string{"vxplain", "vxmd"}) && !slices.Equal(r.Tunnels, []string{"vxmd", "vxplain"}) {
		t.Errorf("tunnels %v, want vxplain and vxmd", r.Tunnels)
	}
	if !slices.Equal(r.MetadataTunnels, []string{"vxmd"}) {
		t.Errorf("metadata tunnels %v, want [vxmd]", r.MetadataTunnels)
	}
}
