package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// TestProbePeerIperf3 runs `cnperf probe tcp|udp --peer iperf3` against a
// stock iperf3 server and against cnperf's own responder (which speaks
// iperf3's protocol on its port too), and reads cnperf's result keys.
func TestProbePeerIperf3(t *testing.T) {
	stock := probetest.StartIperf3Server(t).Addr
	own, _ := startResponder(t)
	cases := []struct {
		name string
		args []string
	}{
		{"tcp against iperf3 -s", []string{"probe", "tcp", "--to", stock, "--peer", "iperf3", "--time", "2s", "--json"}},
		{"udp against cnperf respond", []string{"probe", "udp", "--to", own, "--peer", "iperf3", "--time", "1s", "-b", "100M", "--json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := cnperf(t, 30*time.Second, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var res struct {
				ThroughputBps *struct{ Sender, Receiver float64 } `json:"throughput_bps"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if res.ThroughputBps == nil || res.ThroughputBps.Receiver <= 0 {
				t.Fatalf("no throughput_bps.receiver > 0 in:\n%s", out)
			}
		})
	}
	code, _, errOut := cnperf(t, 10*time.Second, "probe", "tcp", "--to", stock, "--peer", "iperf2")
	if code == 0 || !strings.Contains(errOut, `--peer "iperf2"`) {
		t.Errorf("--peer iperf2: exit %d, %q; want a refusal naming it", code, errOut)
	}
	code, _, errOut = cnperf(t, 10*time.Second, "probe", "rr", "--to", stock, "--peer", "iperf3")
	if code == 0 || !strings.Contains(errOut, "tcp or udp") {
		t.Errorf("rr --peer iperf3: exit %d, %q; want a refusal", code, errOut)
	}
}

// TestRatePerStreamAsIperf3: -b is per stream, as iperf3 counts it, against
// a cnperf responder and a stock iperf3 server alike: -P 2 -b 100M asks for
// 200 Mbit/s in all. That no more is sent holds on any machine; reaching
// it is a figure.
func TestRatePerStreamAsIperf3(t *testing.T) {
	own, _ := startResponder(t)
	stock := probetest.StartIperf3Server(t).Addr
	for _, c := range []struct{ name, to, peer string }{
		{"cnperf responder", own, "cnperf"},
		{"stock iperf3", stock, "iperf3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := cnperf(t, 30*time.Second, "probe", "tcp", "--to", c.to, "--peer", c.peer, "-P", "2", "-b", "100M", "-t", "2", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var res struct {
				ThroughputBps struct{ Sender, Receiver float64 } `json:"throughput_bps"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			got := res.ThroughputBps.Sender
			if got <= 0 || got > 200e6*1.15 {
				t.Errorf("sent %.0f bit/s with -P 2 -b 100M: want more than 0 and at most 200 Mbit/s (+15 %%)", got)
			}
			figure.Check(t, got >= 200e6*0.85, "-P 2 -b 100M against %s sent %.1f Mbit/s in all (want 200, as iperf3)", c.name, got/1e6)
		})
	}
}

// TestRateFlagIsPerStream: -b with -P asks for b per stream, so the spec's
// total rate is b times the streams.
func TestRateFlagIsPerStream(t *testing.T) {
	for _, c := range []struct {
		args []string
		want uint64
	}{
		{[]string{"-P", "2", "-b", "100M"}, 200e6},
		{[]string{"-b", "100M"}, 100e6},
		{[]string{"-P", "4", "-b", "0"}, 0},
	} {
		f, cmd := &probeFlags{}, &cobra.Command{}
		f.register(cmd)
		if err := cmd.ParseFlags(append([]string{"--to", "127.0.0.1:5201"}, c.args...)); err != nil {
			t.Fatal(err)
		}
		spec, err := f.spec(cmd, "tcp")
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if spec.RateBps == nil || *spec.RateBps != c.want {
			t.Errorf("%v: spec rate %v, want %d bit/s in all", c.args, spec.RateBps, c.want)
		}
	}
}
