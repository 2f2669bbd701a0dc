package main

import (
	"encoding/binary"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stat line of a thread of cnperf, from /proc/PID/task/TID/stat
// (utime 41, stime 97, processor 1).
const statLine = "4242 (cnperf) S 4200 4242 4200 0 -1 1077936192 312 0 0 0 41 97 0 0 20 0 9 0 5783203 1263828992 2304 18446744073709551615 4194304 9841349 140731062433936 0 0 0 0 0 2143420159 0 0 0 -1 1 0 0 0 0 0 13533184 13624632 23162880 140731062437722 140731062437783 140731062437783 140731062439914 0\n"

func TestParseStat(t *testing.T) {
	withComm := func(comm string) string { return strings.Replace(statLine, "(cnperf)", "("+comm+")", 1) }
	tests := []struct {
		name      string
		line      string
		ticks     uint64
		cpu       int
		wantError string
	}{
		{name: "plain", line: statLine, ticks: 138, cpu: 1},
		{name: "comm with spaces", line: withComm("a b c"), ticks: 138, cpu: 1},
		{name: "comm with parentheses", line: withComm("x) S 1 2 (y"), ticks: 138, cpu: 1},
		{name: "comm that is only ')'", line: withComm(")"), ticks: 138, cpu: 1},
		{name: "processor 0", line: strings.Replace(statLine, " -1 1 0 0 0 0 0 ", " -1 0 0 0 0 0 0 ", 1), ticks: 138, cpu: 0},
		{name: "no parenthesis", line: "4242 cnperf S 1 2", wantError: "no ')'"},
		{name: "cut short", line: statLine[:80], wantError: "fields after the command name"},
		{name: "not a number", line: strings.Replace(statLine, " 41 97 ", " 41 x7 ", 1), wantError: "invalid syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.line)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ticks != tt.ticks || got.cpu != tt.cpu {
				t.Errorf("got ticks %d cpu %d, want %d and %d", got.ticks, got.cpu, tt.ticks, tt.cpu)
			}
		})
	}
}

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		line    string
		ns      uint64
		wantErr bool
	}{
		{line: "264061684 1016269094 1717\n", ns: 264061684},
		{line: "0 0 1", ns: 0},
		{line: "264061684 1016269094", wantErr: true},
		{line: "-1 0 1", wantErr: true},
		{line: "", wantErr: true},
	}
	for _, tt := range tests {
		ns, err := parseSchedstat(tt.line)
		if (err != nil) != tt.wantErr || ns != tt.ns {
			t.Errorf("parseSchedstat(%q) = %d, %v; want %d, error %v", tt.line, ns, err, tt.ns, tt.wantErr)
		}
	}
}

func TestAuxvValue(t *testing.T) {
	vec := func(pairs ...uint64) []byte {
		b := make([]byte, 8*len(pairs))
		for i, v := range pairs {
			binary.NativeEndian.PutUint64(b[8*i:], v)
		}
		return b
	}
	tests := []struct {
		name    string
		b       []byte
		want    uint64
		wantErr bool
	}{
		{name: "found after others", b: vec(33, 7, 16, 0xbfebfbff, 6, 4096, 17, 100, 0, 0), want: 100},
		{name: "stops at AT_NULL", b: vec(6, 4096, 0, 0, 17, 250), wantErr: true},
		{name: "absent", b: vec(6, 4096), wantErr: true},
		{name: "truncated pair", b: vec(6, 4096, 17)[:20], wantErr: true},
	}
	for _, tt := range tests {
		got, err := auxvValue(tt.b, 17)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: got %d, %v; want %d, error %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCommOf(t *testing.T) {
	for path, want := range map[string]string{
		"bin/cnperf":                      "cnperf",
		"sockperf":                        "sockperf",
		"/usr/local/bin/a-very-long-name": "a-very-long-nam",
	} {
		if got := commOf(path); got != want {
			t.Errorf("commOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestTaskReaderOfThisProcess reads this test's own threads: their run
// times must grow while one of them spins, the spinning thread must be the
// busiest and its CPU readable, and the clock tick rate must be found.
func TestTaskReaderOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newTaskReader(os.Getpid())
	defer r.close()
	before, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until this thread has run 30 ms by getrusage (the machine may
	// be busy: wall time would not say the thread ran).
	for cpu0, deadline := threadCPU(), time.Now().Add(10*time.Second); threadCPU()-cpu0 < uint64(30*time.Millisecond); {
		if time.Now().After(deadline) {
			t.Fatal("this thread did not get 30 ms of CPU within 10 s")
		}
	}
	after, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	gained, busiest := step(before, after)
	if gained < uint64(25*time.Millisecond) {
		t.Errorf("threads gained %v while this one ran 30 ms, want at least 25 ms", time.Duration(gained))
	}
	if busiest != unix.Gettid() {
		t.Errorf("busiest thread %d, want the spinning one %d", busiest, unix.Gettid())
	}
	if cpu, err := r.cpuOf(busiest); err != nil || cpu < 0 || cpu >= runtime.NumCPU() {
		t.Errorf("cpuOf(%d) = %d, %v", busiest, cpu, err)
	}
	if hz, err := clockTicks(); err != nil || hz == 0 {
		t.Errorf("clockTicks() = %d, %v", hz, err)
	}
	if _, err := newTaskReader(1 << 30).read(); err == nil {
		t.Errorf("reading a PID that cannot exist: no error")
	}
}

// TestTaskReaderListsRarely: once listRarely is called, a new thread is
// found at the next listing (every listEvery samples), not before, and
// then with all of its run time.
func TestTaskReaderListsRarely(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	r := newTaskReader(os.Getpid())
	defer r.close()
	before, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	r.listRarely()
	// Goroutines locked to their threads hold one each, so of more of them
	// than there were threads, at least one runs on a new thread. Each
	// spins 5 ms of CPU and stays until the test ends.
	tidc, done := make(chan int), make(chan struct{})
	defer close(done)
	for range len(before) + 1 {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			for cpu0 := threadCPU(); threadCPU()-cpu0 < uint64(5*time.Millisecond); {
			}
			tidc <- unix.Gettid()
			<-done
		}()
	}
	tid := 0
	for range len(before) + 1 {
		id := <-tidc
		if _, old := before[id]; !old {
			tid = id
		}
	}
	if tid == 0 {
		t.Fatalf("no new thread among the locked goroutines' (threads before: %v)", before)
	}
	for i := 1; i <= listEvery; i++ {
		m, err := r.read()
		if err != nil {
			t.Fatal(err)
		}
		ns, found := m[tid]
		switch {
		case i < listEvery && found:
			t.Fatalf("new thread found at read %d after listRarely, before the listing at %d", i, listEvery)
		case i == listEvery && !found:
			t.Fatalf("new thread not found at the listing (read %d)", i)
		case i == listEvery && ns < uint64(4*time.Millisecond):
			t.Errorf("new thread's run time %v, want its 5 ms spin", time.Duration(ns))
		}
	}
}
