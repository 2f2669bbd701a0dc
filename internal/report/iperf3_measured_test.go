package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udp"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestIperf3DocumentOfMeasuredRun measures tcp and udp on loopback with
// cnperf's own probes, exports each result as `report --format iperf3`
// does and reads it back as `jq .end.sum_received.bits_per_second` would:
// one document, whose start.system_info, start.test_start, the cpu
// user/system split and (tcp) the congestion-control names are there and
// agree with the measured result.
func TestIperf3DocumentOfMeasuredRun(t *testing.T) {
	addr := probetest.Start(t, tcp.Handler{}, udp.NewHandler())
	rate := uint64(20_000_000)
	def, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	for _, c := range []struct {
		name   string
		prober probe.Prober
		spec   probe.Spec
	}{
		{"tcp two streams", tcp.Prober{}, probe.Spec{Kind: probe.KindTCP, Target: addr, Duration: probe.Duration(time.Second), Streams: 2}},
		{"tcp reverse", tcp.Prober{}, probe.Spec{Kind: probe.KindTCP, Target: addr, Duration: probe.Duration(time.Second), Reverse: true}},
		{"udp 20M", udp.New(), probe.Spec{Kind: probe.KindUDP, Target: addr, Duration: probe.Duration(time.Second), RateBps: &rate}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := c.prober.Run(ctx, c.spec, probe.Env{})
			if err != nil {
				t.Fatalf("%s: %v", c.spec.Kind, err)
			}
			o := suite.Outcome{Step: suite.Step{Connection: "pod-to-pod", Measure: c.spec.Kind, Spec: c.spec,
				Src: suite.Endpoint{Node: "node-a"}}, Result: res}
			r := report.FromOutcomes("run-measured", "mesh", []suite.Outcome{o})
			r.Environment = &hostinfo.Environment{Platform: "lab", Nodes: []hostinfo.Node{{Name: "node-a", Kernel: "6.1.0-test"}}}
			var b bytes.Buffer
			if err := r.WriteIperf3(&b); err != nil {
				t.Fatal(err)
			}
			var d iperf3json.Doc
			if err := json.Unmarshal(b.Bytes(), &d); err != nil {
				t.Fatalf("not one iperf3 document: %v\n%s", err, b.String())
			}
			if d.End.SumReceived == nil || d.End.SumReceived.BitsPerSecond != res.ThroughputBps.Receiver || res.ThroughputBps.Receiver <= 0 {
				t.Errorf(".end.sum_received = %+v, result's receiver throughput %v", d.End.SumReceived, res.ThroughputBps.Receiver)
			}
			if d.Start.SystemInfo != "Linux node-a 6.1.0-test" {
				t.Errorf("start.system_info %q, want the source node's as recorded", d.Start.SystemInfo)
			}
			ts := d.Start.TestStart
			wantProto := strings.ToUpper(c.spec.Kind)
			if ts == nil || ts.Protocol != wantProto || ts.NumStreams != max(c.spec.Streams, 1) || ts.Duration != 1 ||
				ts.Reverse != map[bool]int{true: 1}[c.spec.Reverse] || ts.Omit != 0 || ts.Bytes != 0 || ts.Blocks != 0 {
				t.Errorf("start.test_start %+v, want %s, %d streams, 1 s, reverse %v", ts, wantProto, max(c.spec.Streams, 1), c.spec.Reverse)
			}
			cpu := d.End.CPU
			if cpu == nil || res.CPUUserPct == nil || res.CPUSystemPct == nil {
				t.Fatalf("cpu_utilization_percent %+v; result's split user %v system %v: want both measured", cpu, res.CPUUserPct, res.CPUSystemPct)
			}
			for _, side := range []struct {
				name              string
				total, user, sys  float64
				wantUser, wantSys float64
			}{
				{"host", cpu.HostTotal, cpu.HostUser, cpu.HostSystem, pick(res.CPUUserPct, c.spec.Reverse, true), pick(res.CPUSystemPct, c.spec.Reverse, true)},
				{"remote", cpu.RemoteTotal, cpu.RemoteUser, cpu.RemoteSystem, pick(res.CPUUserPct, c.spec.Reverse, false), pick(res.CPUSystemPct, c.spec.Reverse, false)},
			} {
				if side.user != side.wantUser || side.sys != side.wantSys || math.Abs(side.total-(side.user+side.sys)) > 1e-6 || side.total <= 0 {
					t.Errorf("%s cpu total %v user %v system %v; want user %v + system %v = total > 0", side.name, side.total, side.user, side.sys, side.wantUser, side.wantSys)
				}
			}
			if c.spec.Kind == probe.KindTCP {
				want := strings.TrimSpace(string(def))
				if d.End.SenderTCPCongestion != want || d.End.ReceiverTCPCongestion != want {
					t.Errorf("sender_tcp_congestion %q, receiver_tcp_congestion %q; want this kernel's default %q on both loopback ends",
						d.End.SenderTCPCongestion, d.End.ReceiverTCPCongestion, want)
				}
			} else if d.End.SenderTCPCongestion != "" || d.End.ReceiverTCPCongestion != "" {
				t.Errorf("udp document names TCP congestion control: %q %q", d.End.SenderTCPCongestion, d.End.ReceiverTCPCongestion)
			}
			t.Logf("%s: sum_received %.3g bit/s, cpu host %.1f%% (user %.1f, system %.1f), congestion %q/%q",
				c.name, d.End.SumReceived.BitsPerSecond, cpu.HostTotal, cpu.HostUser, cpu.HostSystem, d.End.SenderTCPCongestion, d.End.ReceiverTCPCongestion)
		})
	}
}

// pick returns the client's (host) or the responder's (remote) figure of
// v: the client sends unless reversed.
func pick(v *probe.SenderReceiver, reverse, host bool) float64 {
	if host != reverse {
		return v.Sender
	}
	return v.Receiver
}
