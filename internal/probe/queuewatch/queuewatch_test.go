package queuewatch

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qos"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		spec probe.Spec
		want string
	}{
		{"no target", probe.Spec{Kind: probe.KindQueue}, "target"},
		{"not an address", probe.Spec{Kind: probe.KindQueue, Target: "node-a"}, "IP address"},
		{"interval too short", probe.Spec{Kind: probe.KindQueue, Target: "10.0.0.1", Interval: probe.Duration(time.Microsecond)}, "interval"},
		{"too long", probe.Spec{Kind: probe.KindQueue, Target: "10.0.0.1", Duration: probe.Duration(2 * time.Hour)}, "at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Prober{}.Validate(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := (Prober{}).Validate(probe.Spec{Kind: probe.KindQueue, Target: "10.0.0.1"}); err != nil {
		t.Errorf("a plain watch: %v", err)
	}
}

// TestWatchSeesABacklog: a 1 Mbit/s tbf on a namespace's veth with UDP
// offered far above it: the watch, run in that namespace, names the veth
// as the link toward the peer and sees a backlog and drops there.
func TestWatchSeesABacklog(t *testing.T) {
	p := nettest.NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := qos.Target{NetNS: p.A.Path(), Link: "eth0"}
	setup := qos.TBF{Rate: 1e6, BurstBytes: 4000, LimitBytes: 20000}
	if err := qos.Apply(ctx, target, setup); err != nil {
		t.Fatalf("tbf: %v", err)
	}
	var conn net.Conn
	if err := p.A.Do(func() (err error) {
		conn, err = net.Dial("udp", nettest.HostPort(p.AddrB, 9))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // about 50 Mbit/s of datagrams, far above the tbf
		defer wg.Done()
		buf := make([]byte, 1200)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for range 5 {
					_, _ = conn.Write(buf)
				}
			}
		}
	}()
	var res *probe.Result
	err := p.A.Do(func() (err error) {
		res, err = Prober{}.Run(ctx, probe.Spec{Kind: probe.KindQueue, Target: p.AddrB.String(),
			Duration: probe.Duration(time.Second), Interval: probe.Duration(5 * time.Millisecond)}, probe.Env{})
		return err
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	w := res.Queue
	if w == nil || w.Toward != "eth0" || w.Samples < 1 {
		t.Fatalf("queue %+v: want eth0 toward the peer and samples", w)
	}
	var eth0 *probe.LinkQueue
	for i := range w.Links {
		if w.Links[i].Link == "eth0" {
			eth0 = &w.Links[i]
		}
	}
	if eth0 == nil || eth0.MaxBacklogBytes == 0 || eth0.MeanBacklogBytes <= 0 || eth0.Drops == 0 ||
		eth0.BusyPct <= 0 || eth0.BusyPct > 100 || eth0.MaxBacklogBytes > 20000+1500 {
		t.Errorf("eth0 %+v: want a backlog (at most the 20,000-byte limit and a packet) and drops", eth0)
	}
	if eth0 != nil && (eth0.P50BacklogBytes == nil || *eth0.P50BacklogBytes < 0 || *eth0.P50BacklogBytes > 1.016*float64(eth0.MaxBacklogBytes)) {
		t.Errorf("eth0 median backlog %v: want one between 0 and the largest, %d", eth0.P50BacklogBytes, eth0.MaxBacklogBytes)
	}
	if w.TCPRetransSegs == nil || w.UDPRcvbufErrors == nil {
		t.Errorf("snmp deltas missing: %+v (notes %q)", w, res.Notes)
	}
}
