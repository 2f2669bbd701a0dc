package agent

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestReleaseStartupPages: the executable's read-only pages leave the
// process's resident set (RssFile falls), and the process runs on.
func TestReleaseStartupPages(t *testing.T) {
	before := rssFileKB(t)
	n, err := ReleaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKB(t)
	t.Logf("read-only mappings of the executable: %d bytes; RssFile %d kB -> %d kB", n, before, after)
	if n <= 0 || after >= before {
		t.Errorf("released %d bytes of mappings, RssFile %d kB -> %d kB; want the mappings found and RssFile lower", n, before, after)
	}
	if got := strings.Repeat("ok", 2); got != "okok" { // code runs on after the release
		t.Errorf("after the release: %q", got)
	}
}

func TestReadOnlyMapping(t *testing.T) {
	const exe = "/usr/bin/cnperf"
	for _, tc := range []struct {
		line       string
		start, end uintptr
		ok         bool
	}{
		{"00400000-02190000 r-xp 00000000 fe:00 10846218 /usr/bin/cnperf", 0x400000, 0x2190000, true},
		{"02190000-04166000 r--p 01d90000 fe:00 10846218 /usr/bin/cnperf", 0x2190000, 0x4166000, true},
		{"04166000-04250000 rw-p 03d66000 fe:00 10846218 /usr/bin/cnperf", 0, 0, false}, // written data
		{"7f9b956fe000-7f9b95b00000 rw-p 00000000 00:00 0", 0, 0, false},                // anonymous
		{"00400000-02190000 r-xp 00000000 fe:00 1 /usr/bin/other", 0, 0, false},
		{"00400000-02190000 r-xp 00000000 fe:00 1 /usr/bin/cnperf (deleted)", 0, 0, false},
		{"02190000-00400000 r--p 0 fe:00 1 /usr/bin/cnperf", 0, 0, false},
		{"garbage", 0, 0, false},
	} {
		s, e, ok := readOnlyMapping(tc.line, exe)
		if ok != tc.ok || s != tc.start || e != tc.end {
			t.Errorf("%q: %#x-%#x %v, want %#x-%#x %v", tc.line, s, e, ok, tc.start, tc.end, tc.ok)
		}
	}
}

func rssFileKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}
