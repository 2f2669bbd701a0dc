package external

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
)

// The figures below were read off the captured files in testdata/ (made by
// capture_test.go from the real tools on this machine).

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9+1e-6*math.Abs(want)
}

type check struct {
	name      string
	got, want float64
}

func verify(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseIperf3Golden(t *testing.T) {
	tests := []struct {
		file string
		kind string
		want func(t *testing.T, r *probe.Result)
	}{
		{"iperf3_tcp_lo.json", "tcp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 4900782080}, {"bytes.receiver", r.Bytes.Receiver, 4900782080},
				{"bps.sender", r.ThroughputBps.Sender, 19600795825.29679}, {"bps.receiver", r.ThroughputBps.Receiver, 19600423461.5623},
				{"retransmits", float64(*r.Retransmits), 46}, {"srtt_ms", *r.SRTTms, 0.081},
				// normal mode: local (host_total) is the sender
				{"cpu.sender", r.CPUPct.Sender, 93.2419796502461}, {"cpu.receiver", r.CPUPct.Receiver, 37.6045144754267},
				{"intervals", float64(len(r.Intervals)), 2}, {"interval0.bytes", r.Intervals[0].Bytes, 2423521280},
				{"interval0.retransmits", float64(*r.Intervals[0].Retransmits), 36},
			})
		}},
		{"iperf3_tcp_reverse_lo.json", "tcp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 5013504000}, {"bytes.receiver", r.Bytes.Receiver, 5013241750},
				{"retransmits", float64(*r.Retransmits), 20},
				// reverse: the remote end sent, so remote_total is the sender's CPU
				{"cpu.sender", r.CPUPct.Sender, 95.3078482493482}, {"cpu.receiver", r.CPUPct.Receiver, 36.98027397534122},
			})
			if r.SRTTms != nil {
				t.Errorf("srtt_ms = %v in reverse mode, want absent (not measured locally)", *r.SRTTms)
			}
		}},
		{"iperf3_tcp_parallel_lo.json", "tcp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"streams", float64(len(r.Streams)), 2}, {"bytes.sender", r.Bytes.Sender, 5356912640},
				{"retransmits", float64(*r.Retransmits), 11},
				{"stream sum", r.Streams[0].Bytes.Sender + r.Streams[1].Bytes.Sender, 5356912640},
			})
		}},
		{"iperf3_udp_veth.json", "udp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 49980000}, {"bytes.receiver", r.Bytes.Receiver, 49765800},
				{"packets.sent", float64(r.Packets.Sent), 35700}, {"packets.lost", float64(r.Packets.Lost), 153},
				{"packets.received", float64(r.Packets.Received), 35547},
				{"loss_pct", *r.LossPct, 100 * 153.0 / 35700}, {"jitter_ms", *r.JitterMs, 0.00315430800417959},
				{"cpu.sender", r.CPUPct.Sender, 6.426024015974015},
			})
			if r.Src != "198.18.0.1:37557" || r.Dst != "198.18.0.2:5201" {
				t.Errorf("src/dst = %s/%s", r.Src, r.Dst)
			}
		}},
		{"iperf3_udp_reverse_lo.json", "udp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"packets.sent", float64(r.Packets.Sent), 382}, {"loss_pct", *r.LossPct, 0},
				{"jitter_ms", *r.JitterMs, 0.006911661949060073},
				{"cpu.sender", r.CPUPct.Sender, 2.5329125644702293}, {"cpu.receiver", r.CPUPct.Receiver, 0.11485532128002207},
			})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			raw := readTestdata(t, tc.file)
			r, err := ParseIperf3JSON([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != tc.kind || r.Tool != "iperf3" || r.Raw != raw {
				t.Errorf("kind/tool/raw = %q/%q/%d bytes", r.Kind, r.Tool, len(r.Raw))
			}
			tc.want(t, r)
		})
	}
}

func TestParseIperf3Errors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"refused", readTestdata(t, "iperf3_refused_lo.json"), "Connection refused"},
		{"not json", "iperf3: error - unable to connect", "iperf3 json"},
		{"server output", `{"start":{"version":"iperf 3.12"},"intervals":[],"end":{}}`, "test_start"},
		{"unfinished", `{"start":{"test_start":{"protocol":"TCP"}},"intervals":[],"end":{}}`, "sum_sent"},
		{"sctp", `{"start":{"test_start":{"protocol":"SCTP"}},"end":{}}`, "SCTP"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseIperf3JSON([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseIperf2Golden(t *testing.T) {
	const mb, gb = 1 << 20, 1 << 30
	tests := []struct {
		client, server string
		kind           string
		want           func(t *testing.T, r *probe.Result)
	}{
		{"iperf2_udp_veth_client.txt", "iperf2_udp_veth_server.txt", "udp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 25.0 * mb}, {"bytes.receiver", r.Bytes.Receiver, 24.8 * mb},
				{"bps.sender", r.ThroughputBps.Sender, 105e6}, {"bps.receiver", r.ThroughputBps.Receiver, 104e6},
				{"packets.sent", float64(r.Packets.Sent), 18728}, {"packets.lost", float64(r.Packets.Lost), 127},
				{"loss_pct", *r.LossPct, 100 * 127.0 / 18728}, {"pps", *r.PPS, 9363},
				{"latency.avg", r.LatencyMs.Avg, 0.001}, {"latency.max", r.LatencyMs.Max, 0.094},
				{"latency.stdev", r.LatencyMs.Stdev, 0.002},
				{"tos", float64(r.TOS), 0x10}, {"dscp", float64(r.DSCP), 4}, {"dscp_received", float64(*r.DSCPReceived), 4},
				{"hist.width", r.Histogram.BinWidthUs, 10}, {"hist.bins", float64(len(r.Histogram.Counts)), 100},
				{"hist[0]", float64(r.Histogram.Counts[0]), 18526}, {"hist[8]", float64(r.Histogram.Counts[8]), 2},
				{"hist[9]", float64(r.Histogram.Counts[9]), 1},
				// nearest rank 18583 of 18601 falls in label 3 (18526+40+24)
				{"p99.9", r.LatencyMs.P999, 0.03}, {"p50", r.LatencyMs.P50, 0.01},
				{"duration", r.DurationS, 2.0001},
			})
			if !*r.DSCPSurvived {
				t.Error("dscp_survived = false, want true (tos rx=0x10)")
			}
		}},
		{"iperf2_udp_loss_lo_client.txt", "iperf2_udp_loss_lo_server.txt", "udp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"packets.lost", float64(r.Packets.Lost), 305628}, {"packets.sent", float64(r.Packets.Sent), 952938},
				{"latency.max", r.LatencyMs.Max, 12.101},
				// 2 values beyond 50 bins of 100 us land in the last bin
				{"hist.last", float64(r.Histogram.Counts[49]), 2},
				{"intervals", float64(len(r.Intervals)), 2}, {"interval0.packets", float64(*r.Intervals[0].Packets), 471053 - 235470},
			})
		}},
		{"iperf2_udp_lo_client.txt", "", "udp", func(t *testing.T, r *probe.Result) {
			if r.Histogram != nil || r.LatencyMs == nil || r.LatencyMs.P50 != 0 {
				t.Errorf("without server output: histogram %v latency %+v", r.Histogram, r.LatencyMs)
			}
		}},
		{"iperf2_tcp_veth_client.txt", "iperf2_tcp_veth_server.txt", "tcp", func(t *testing.T, r *probe.Result) {
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 3.98 * gb}, {"bytes.receiver", r.Bytes.Receiver, 3.98 * gb},
				{"bps.sender", r.ThroughputBps.Sender, 17.1e9}, {"retransmits", float64(*r.Retransmits), 14657},
				{"srtt_ms", *r.SRTTms, 0.169}, {"intervals", float64(len(r.Intervals)), 2},
			})
			if r.Src != "198.18.0.1:37224" || r.Dst != "198.18.0.2:5001" {
				t.Errorf("src/dst = %s/%s", r.Src, r.Dst)
			}
		}},
		{"iperf2_tcp_fM_lo_client.txt", "", "tcp", func(t *testing.T, r *probe.Result) {
			// -f M: transfer in MBytes, bandwidth in MBytes/sec (2^20 bytes)
			verify(t, []check{
				{"bytes.sender", r.Bytes.Sender, 4584 * mb}, {"bps.sender", r.ThroughputBps.Sender, 2277 * 8 * mb},
				{"bytes.receiver", r.Bytes.Receiver, 0},
			})
			if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "not measured") {
				t.Errorf("notes = %q, want one saying the receiver was not measured", r.Notes)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.client, func(t *testing.T) {
			srv := ""
			if tc.server != "" {
				srv = readTestdata(t, tc.server)
			}
			r, err := ParseIperf2(readTestdata(t, tc.client), srv)
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != tc.kind || r.Tool != "iperf" {
				t.Errorf("kind/tool = %q/%q", r.Kind, r.Tool)
			}
			tc.want(t, r)
		})
	}
}

func TestParseIperf2Rejects(t *testing.T) {
	good := readTestdata(t, "iperf2_udp_veth_client.txt")
	tests := []struct{ name, client, server, want string }{
		{"garbage line", strings.Replace(good, "UDP buffer size", "Something new", 1), "", "line 5"},
		{"unknown header", strings.Replace(good, "Write/Err  PPS", "Foo Bar", 1), "", "unknown report header"},
		{"bad unit", strings.Replace(good, "25.0 MBytes", "25.0 Mbarrels", 1), "", "line"},
		{"server as client", readTestdata(t, "iperf2_udp_veth_server.txt"), "", "server's output"},
		{"no report", strings.Split(good, "[  1] Sent")[0], "", "no Server Report"},
		{"proto mismatch", readTestdata(t, "iperf2_tcp_veth_client.txt"), readTestdata(t, "iperf2_udp_veth_server.txt"), "client ran tcp"},
		{"empty", "", "", "no \"Client connecting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseIperf2(tc.client, tc.server)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParsePingGolden(t *testing.T) {
	tests := []struct {
		file           string
		sent, received int64
		loss           float64
		rtt            *probe.Summary // nil: no replies
	}{
		{"ping_lo.txt", 5, 5, 0, &probe.Summary{Min: 0.030, Avg: 0.038, Max: 0.046, P50: 0.040, P90: 0.046, Count: 5}},
		{"ping_loss_veth.txt", 3, 0, 100, nil},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParsePing(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			verify(t, []check{{"sent", float64(r.Packets.Sent), float64(tc.sent)},
				{"received", float64(r.Packets.Received), float64(tc.received)}, {"loss", *r.LossPct, tc.loss}})
			if tc.rtt == nil {
				if r.RTTms != nil {
					t.Errorf("rtt_ms = %+v, want none", r.RTTms)
				}
				return
			}
			verify(t, []check{{"min", r.RTTms.Min, tc.rtt.Min}, {"avg", r.RTTms.Avg, tc.rtt.Avg}, {"max", r.RTTms.Max, tc.rtt.Max},
				{"p50", r.RTTms.P50, tc.rtt.P50}, {"p90", r.RTTms.P90, tc.rtt.P90}, {"count", float64(r.RTTms.Count), float64(tc.rtt.Count)}})
		})
	}
	// Every ping capture parses, and its summary agrees with ping's own line
	// (ParsePing checks that).
	files, _ := filepath.Glob("testdata/ping_*.txt")
	for _, f := range files {
		if strings.Contains(f, "noroute") {
			continue
		}
		if _, err := ParsePing(readTestdata(t, filepath.Base(f))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParsePingRejects(t *testing.T) {
	good := readTestdata(t, "ping_lo.txt")
	tests := []struct{ name, in, want string }{
		{"no route", readTestdata(t, "ping_noroute_veth.txt"), "PING header"},
		{"interrupted", strings.Split(good, "\n---")[0], "no statistics line"},
		{"missing reply", strings.Replace(good, "64 bytes from 127.0.0.1: icmp_seq=3 ttl=64 time=0.041 ms\n", "", 1), "4 reply lines"},
		{"summary disagrees", strings.Replace(good, "0.030/0.038/0.046", "0.010/0.038/0.046", 1), "summary"},
		{"unknown line", strings.Replace(good, "64 bytes from 127.0.0.1: icmp_seq=2", "Request timeout for icmp_seq 2", 1), "line 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePing(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseTracerouteGolden(t *testing.T) {
	type hop struct {
		addr    string
		rtts    []float64
		reached bool
	}
	tests := []struct {
		file string
		hops []hop
	}{
		{"traceroute_routed.txt", []hop{{"198.18.1.254", []float64{0.199, 0.004, 0.002}, false}, {"198.18.2.1", []float64{0.378, 0.014, 0.003}, true}}},
		{"traceroute_unreach_routed.txt", []hop{{"198.18.1.254", []float64{0.015}, false}, {"", nil, false}, {"", nil, false}, {"", nil, false}}},
		{"traceroute_veth.txt", []hop{{"198.18.0.2", []float64{0.033, 0.04, 0.004}, true}}},
		{"traceroute_lo.txt", []hop{{"127.0.0.1", []float64{0.022, 0.002, 0.001}, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParseTraceroute(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Hops) != len(tc.hops) {
				t.Fatalf("%d hops, want %d", len(r.Hops), len(tc.hops))
			}
			for i, h := range tc.hops {
				g := r.Hops[i]
				if g.TTL != i+1 || g.Addr != h.addr || g.Reached != h.reached || len(g.RTTms) != len(h.rtts) {
					t.Errorf("hop %d = %+v, want %+v", i+1, g, h)
					continue
				}
				for j := range h.rtts {
					if !near(g.RTTms[j], h.rtts[j]) {
						t.Errorf("hop %d rtt %d = %v, want %v", i+1, j, g.RTTms[j], h.rtts[j])
					}
				}
			}
		})
	}
}

func TestParseTracerouteRejects(t *testing.T) {
	good := readTestdata(t, "traceroute_routed.txt")
	tests := []struct{ name, in, want string }{
		{"empty", "", "no header"},
		{"stderr", "connect: Network is unreachable\n", "header"},
		{"names", strings.Replace(good, " 198.18.1.254 ", " router.lan (198.18.1.254) ", 1), "token"},
		{"out of order", good + " 1  198.18.1.254  0.1 ms\n", "out of order"},
		{"header only", strings.SplitN(good, "\n", 2)[0], "no hops"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTraceroute(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
