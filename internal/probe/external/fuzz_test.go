package external

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
)

// The fuzz targets below start from the real tools' output captured in
// testdata/ (capture_test.go). `go test` runs the seeds as tests;
// scripts/fuzz.sh runs each target for a bounded time.

// addTestdata adds every testdata file whose name starts with prefix to
// the corpus.
func addTestdata(f *testing.F, prefix string, add func(string)) {
	f.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", prefix+"*"))
	if err != nil || len(names) == 0 {
		f.Fatalf("no testdata/%s* seeds (%v)", prefix, err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		add(string(b))
	}
}

// checkParsed holds for any output a parser accepts: a result of the
// parser's tool that JSON can encode (no NaN or infinity reaches a report).
func checkParsed(t *testing.T, tool string, r *probe.Result, err error) {
	t.Helper()
	if err != nil {
		if r != nil {
			t.Fatalf("error %v with a result", err)
		}
		return
	}
	if r == nil {
		t.Fatal("no result and no error")
	}
	if r.Tool != tool {
		t.Fatalf("tool %q, want %q", r.Tool, tool)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("accepted output gives a result JSON cannot hold: %v", err)
	}
}

func FuzzParsePing(f *testing.F) {
	addTestdata(f, "ping_", func(s string) { f.Add(s) })
	f.Fuzz(func(t *testing.T, out string) {
		r, err := ParsePing(out)
		checkParsed(t, ToolPing, r, err)
	})
}

func FuzzParseTraceroute(f *testing.F) {
	addTestdata(f, "traceroute_", func(s string) { f.Add(s) })
	f.Fuzz(func(t *testing.T, out string) {
		r, err := ParseTraceroute(out)
		checkParsed(t, ToolTraceroute, r, err)
	})
}

func FuzzParseIperf3JSON(f *testing.F) {
	addTestdata(f, "iperf3_", func(s string) { f.Add([]byte(s)) })
	f.Fuzz(func(t *testing.T, out []byte) {
		r, err := ParseIperf3JSON(out)
		checkParsed(t, ToolIperf3, r, err)
	})
}

func FuzzParseIperf2(f *testing.F) {
	// Client and server outputs of the same runs, paired by file name.
	clients, err := filepath.Glob(filepath.Join("testdata", "iperf2_*_client.txt"))
	if err != nil || len(clients) == 0 {
		f.Fatalf("no iperf2 client seeds (%v)", err)
	}
	for _, c := range clients {
		cb, err := os.ReadFile(c)
		if err != nil {
			f.Fatal(err)
		}
		sb, _ := os.ReadFile(strings.TrimSuffix(c, "_client.txt") + "_server.txt") // absent for some runs
		f.Add(string(cb), string(sb))
		f.Add(string(cb), "")
	}
	f.Fuzz(func(t *testing.T, client, server string) {
		r, err := ParseIperf2(client, server)
		checkParsed(t, ToolIperf2, r, err)
	})
}

// FuzzAllowList checks the allow-list checker: whatever it accepts holds
// only plain characters and flags (no shell metacharacter, no positional
// argument), parses again to itself, and builds an argument list with
// cnperf's own destination only.
func FuzzAllowList(f *testing.F) {
	seeds := []struct{ tool, param string }{
		{"ping", "-c 5"}, {"ping", "-c 3 -i 0.2 -s 1400 -Q EF -W 1"}, {"ping", "-c 5; rm -rf /"},
		{"iperf", "-u -b 100M -t 10 -i 1 -S 0x10"}, {"iperf", "-i 1 -f M"}, {"iperf", "-e --udp-histogram"},
		{"iperf3", "-u -b 1G -l 1400 -t 5 -R -P 4"}, {"iperf3", "--time=3 --dscp EF"}, {"iperf3", "-c 10.0.0.1"},
		{"traceroute", "\t-I  -q 2 "}, {"traceroute", "-m 5 -w 1"}, {"traceroute", "-T -p 80"},
	}
	for _, s := range seeds {
		f.Add(s.tool, s.param)
	}
	f.Fuzz(func(t *testing.T, tool, param string) {
		args, err := ParseParam(tool, param)
		if err != nil {
			return
		}
		for _, a := range args {
			if a == "" || strings.ContainsAny(a, shellMeta+" \t") {
				t.Fatalf("accepted argument %q of %q", a, param)
			}
		}
		again, err := ParseParam(tool, strings.Join(args, " "))
		if err != nil || !slices.Equal(again, args) {
			t.Fatalf("validated args %q do not parse to themselves: %q, %v", args, again, err)
		}
		inv, err := Build(tool, param, "192.0.2.1")
		if err != nil {
			return // a combination Argv refuses
		}
		argv, err := inv.Argv()
		if err != nil {
			t.Fatalf("Build accepted %q but Argv refuses it: %v", param, err)
		}
		if n := strings.Count(strings.Join(argv, " "), "192.0.2.1"); n != 1 {
			t.Fatalf("argv %q names the destination %d times, want once", argv, n)
		}
		if tool == ToolIperf3 || tool == ToolIperf2 {
			if i := slices.Index(argv, "-c"); i != 0 || slices.Contains(argv[1:], "-c") || slices.Contains(argv, "-s") {
				t.Fatalf("iperf argv %q: want one -c (cnperf's, first) and no -s", argv)
			}
		} else if argv[len(argv)-1] != "192.0.2.1" {
			t.Fatalf("%s argv %q does not end with the destination", tool, argv)
		}
	})
}
