package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

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
