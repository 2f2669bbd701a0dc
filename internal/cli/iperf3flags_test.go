package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestProbeFlagsMeanWhatIperf3Means: the flags `cnperf probe` shares with
// iperf3 take iperf3's values and mean what iperf3's mean: -i in bare
// seconds, -S a TOS byte (strtol's bases), -J JSON, -l and -w in 1024s;
// -c, which is ping's count here, says where iperf3's server goes.
func TestProbeFlagsMeanWhatIperf3Means(t *testing.T) {
	for _, c := range []struct {
		args    []string
		check   func(f *probeFlags, tos *int) bool
		wantErr string
	}{
		{args: []string{"-i", "1"}, check: func(f *probeFlags, _ *int) bool { return f.interval == time.Second }},
		{args: []string{"-i", "0.5"}, check: func(f *probeFlags, _ *int) bool { return f.interval == 500*time.Millisecond }},
		{args: []string{"-i", "200ms"}, check: func(f *probeFlags, _ *int) bool { return f.interval == 200*time.Millisecond }},
		{args: []string{"-S", "0xb8"}, check: func(_ *probeFlags, tos *int) bool { return tos != nil && *tos == 0xb8 }},
		{args: []string{"-S", "020"}, check: func(_ *probeFlags, tos *int) bool { return tos != nil && *tos == 16 }},
		{args: []string{"-J"}, check: func(f *probeFlags, _ *int) bool { return f.asJSON }},
		{args: []string{"-l", "64K", "-w", "1M"}, check: func(f *probeFlags, _ *int) bool { return f.size == 64<<10 && f.window == 1<<20 }},
		{args: []string{"-c", "10.0.0.1"}, wantErr: "--to HOST:PORT"},
		{args: []string{"-S", "0x100"}, wantErr: "0-255"},
	} {
		f, cmd := &probeFlags{}, &cobra.Command{}
		f.register(cmd)
		err := cmd.ParseFlags(append([]string{"--to", "127.0.0.1:5201"}, c.args...))
		var tos *int
		if err == nil {
			spec, serr := f.spec(cmd, "tcp")
			err, tos = serr, spec.TOS
		}
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: error %v, want one saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if !c.check(f, tos) {
			t.Errorf("%v: parsed as interval %v, tos %v, json %v, size %d, window %d", c.args, f.interval, tos, f.asJSON, f.size, f.window)
		}
	}
}

// TestProbeIntervalZeroAsIperf3: -i 0 prints no interval reports, as
// iperf3's -i 0, and still the summary; udp -P names the way to iperf3's
// -u -P; --help says where cnperf's defaults and -c differ from iperf3's.
func TestProbeIntervalZeroAsIperf3(t *testing.T) {
	addr, _ := startResponder(t)
	code, out, errOut := cnperf(t, 30*time.Second, "probe", "tcp", "--to", addr, "-t", "1.5", "-i", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "[SUM]") || !strings.Contains(out, "receiver:") {
		t.Errorf("-i 0: want the summary and no interval reports, got:\n%s", out)
	}
	code, out, _ = cnperf(t, 30*time.Second, "probe", "tcp", "--to", addr, "-t", "1", "-i", "0.5")
	if code != 0 || strings.Count(out, "[SUM]") < 2 {
		t.Errorf("-i 0.5: exit %d, want interval reports every 0.5 s, got:\n%s", code, out)
	}
	code, _, errOut = cnperf(t, 10*time.Second, "probe", "udp", "--to", addr, "-P", "2")
	if code == 0 || !strings.Contains(errOut, "--peer iperf3") {
		t.Errorf("udp -P 2: exit %d, %q; want a refusal pointing to --peer iperf3", code, errOut)
	}
	_, help, _ := cnperf(t, 10*time.Second, "probe", "--help")
	for _, want := range []string{"udp 1400 where iperf3 takes the path's MSS", "not iperf3's -c", "-S, --tos", "-J, --json", "-i 0 prints none"} {
		if !strings.Contains(help, want) {
			t.Errorf("probe --help lacks %q", want)
		}
	}
}
