package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// interruptedProbe runs the cnperf binary with args as a child process,
// waits until its output shows ready(line) (or, when ready is nil, for
// settle), sends it SIGINT and returns its exit code and output.
func interruptedProbe(t *testing.T, args []string, ready func(string) bool, settle time.Duration) (int, string, string) {
	t.Helper()
	bin := cnperftest.Binary(t) // built before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var errb strings.Builder
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var mu sync.Mutex
	seen := make(chan struct{})
	var once sync.Once
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if ready != nil && ready(sc.Text()) {
				once.Do(func() { close(seen) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	if ready != nil {
		select {
		case <-seen:
		case <-read:
			t.Fatalf("%v ended before it was ready: %s", args, errb.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: not ready after 30s", args)
		}
	} else {
		time.Sleep(settle) // the probe prints nothing while it runs
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-read
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running 90 s after starting; stderr: %s", args, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return code, out.String(), errb.String()
}

// TestSIGINTPrintsSummary: SIGINT mid-run ends rr, stamp and --peer
// iperf3 probes with the summary of what was measured and iperf3's exit
// status, 1, saying on stderr that it was interrupted; with
// --json-stream the last line is the end event with the result. rr
// reports progress (interval lines, interval events) while it runs.
func TestSIGINTPrintsSummary(t *testing.T) {
	resp, _ := startResponder(t)
	refl := startReflector(t)
	stock := probetest.StartIperf3Server(t).Addr
	cases := []struct {
		name  string
		args  []string
		ready func(string) bool
		want  []string // in the summary
	}{
		// rr prints a progress line a second, as iperf3's intervals.
		{"rr", []string{"probe", "rr", "--to", resp, "-t", "60s"},
			func(l string) bool { return strings.Contains(l, "trans/s") && strings.Contains(l, "rtt p50") }, []string{"rr ", "rtt ms: min/avg/max", "note: stopped early"}},
		{"rr --json-stream", []string{"probe", "rr", "--to", resp, "-t", "60s", "--proto", "udp", "--json-stream"},
			func(l string) bool {
				return strings.Contains(l, `"event":"interval"`) && strings.Contains(l, `"transactions":`)
			}, []string{`"event":"start"`, `"rtt_p99_ms":`, `"event":"end"`}},
		// udp -R: the responder sends; the interrupt asks it to stop and
		// the summary has its count and this side's.
		{"udp -R", []string{"probe", "udp", "--to", resp, "-R", "-t", "60s", "-b", "20M"},
			func(l string) bool { return strings.HasPrefix(l, "[SUM]") }, []string{"sender:", "receiver:", "note: stopped early"}},
		// stamp prints a line per reflected packet as it arrives.
		{"stamp", []string{"probe", "stamp", "--to", refl, "-c", "100000", "-i", "10ms"},
			func(l string) bool { return strings.Contains(l, "stamp_seq=0 time=") }, []string{"stamp ", "forward:", "note: stopped early"}},
		// --peer iperf3 prints the client's intervals, as iperf3's client.
		{"tcp --peer iperf3", []string{"probe", "tcp", "--to", stock, "--peer", "iperf3", "-t", "60s"},
			func(l string) bool { return strings.HasPrefix(l, "[SUM]") }, []string{"sender:", "receiver:", "note: stopped early"}},
		{"udp --peer iperf3 --json-stream", []string{"probe", "udp", "--to", stock, "--peer", "iperf3", "-R", "-b", "10M", "-t", "60s", "--json-stream"},
			func(l string) bool { return strings.Contains(l, `"event":"interval"`) }, []string{`"event":"start"`, `"jitter_ms":`, `"event":"end"`}},
		{"tcp --json-stream", []string{"probe", "tcp", "--to", resp, "-t", "60s", "--json-stream"},
			func(l string) bool { return strings.Contains(l, `"event":"interval"`) }, []string{`"event":"start"`, `"event":"interval"`, `"event":"end"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := interruptedProbe(t, tc.args, tc.ready, 2*time.Second)
			if code != 1 {
				t.Errorf("exit %d, want 1 as iperf3 after an interrupt; stderr: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s\nstderr: %s", w, out, errOut)
				}
			}
			if !strings.Contains(errOut, "interrupt") {
				t.Errorf("stderr does not say it was interrupted: %s", errOut)
			}
			if strings.Contains(tc.name, "json-stream") {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				var ev struct {
					Event string         `json:"event"`
					Data  map[string]any `json:"data"`
				}
				for _, l := range lines {
					if err := json.Unmarshal([]byte(l), &ev); err != nil {
						t.Fatalf("line %q is not one JSON object: %v", l, err)
					}
				}
				if kind := tc.args[1]; ev.Event != "end" || ev.Data["kind"] != kind {
					t.Errorf("last event %q (%v), want end with the %s result", ev.Event, ev.Data["kind"], kind)
				}
			}
		})
	}
}
