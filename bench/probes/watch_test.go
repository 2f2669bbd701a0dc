package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur map[int]uint64
		gained    uint64
		busiest   int
	}{
		{
			name:    "the thread that gained most, not the one with most run time",
			prev:    map[int]uint64{10: 9_000_000, 11: 100},
			cur:     map[int]uint64{10: 9_001_000, 11: 5_100},
			gained:  6_000,
			busiest: 11,
		},
		{
			name:    "a new thread counts from zero",
			prev:    map[int]uint64{10: 500},
			cur:     map[int]uint64{10: 600, 12: 4_000},
			gained:  4_100,
			busiest: 12,
		},
		{
			name:    "a reused thread id whose run time went back counts from zero",
			prev:    map[int]uint64{10: 9_000},
			cur:     map[int]uint64{10: 300},
			gained:  300,
			busiest: 10,
		},
		{
			name:    "an exited thread adds nothing",
			prev:    map[int]uint64{10: 500, 11: 800},
			cur:     map[int]uint64{10: 700},
			gained:  200,
			busiest: 10,
		},
		{
			name:    "nothing gained: no busiest thread",
			prev:    map[int]uint64{10: 500},
			cur:     map[int]uint64{10: 500},
			gained:  0,
			busiest: 0,
		},
		{
			name:    "a tie goes to the lower thread id",
			prev:    map[int]uint64{10: 0, 11: 0, 12: 0},
			cur:     map[int]uint64{12: 50, 11: 50, 10: 10},
			gained:  110,
			busiest: 11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 20 { // map order varies between calls
				g, b := step(tt.prev, tt.cur)
				if g != tt.gained || b != tt.busiest {
					t.Fatalf("step = %d, thread %d; want %d, thread %d", g, b, tt.gained, tt.busiest)
				}
			}
		})
	}
}

func TestLoopDetector(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const p = 10 * time.Millisecond
	busy, idle := uint64(4*time.Millisecond), uint64(100*time.Microsecond)
	type period struct{ client, server uint64 }
	tests := []struct {
		name    string
		periods []period
		found   int // index of the period at which it is found, -1 never
		start   int // index of the period the loop starts with
	}{
		{name: "busy from the first period", periods: []period{{busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}},
			found: 4, start: 0},
		{name: "a connect, a sleep, then the loop",
			periods: []period{{busy, busy}, {busy, busy}, {0, 0}, {0, 0}, {idle, idle}, {busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}},
			found:   9, start: 5},
		{name: "the client busy alone is no loop", periods: []period{{busy, 0}, {busy, idle}, {busy, 0}, {busy, 0}, {busy, 0}, {busy, 0}},
			found: -1},
		{name: "four busy periods are not enough", periods: []period{{busy, busy}, {busy, busy}, {busy, busy}, {busy, busy}, {idle, busy}},
			found: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d loopDetector
			found := -1
			for i, pr := range tt.periods {
				from := t0.Add(time.Duration(i) * p)
				if d.feed(from, from.Add(p), pr.client, pr.server) {
					found = i
					break
				}
			}
			if found != tt.found {
				t.Fatalf("found at period %d, want %d", found, tt.found)
			}
			if found >= 0 && !d.start.Equal(t0.Add(time.Duration(tt.start)*p)) {
				t.Errorf("start %v, want period %d", d.start.Sub(t0), tt.start)
			}
		})
	}
}

func TestCrossCheck(t *testing.T) {
	if userHZ == 0 {
		t.Skip("clock tick rate unknown")
	}
	tick := uint64(1e9 / userHZ)
	tests := []struct {
		name  string
		ns    uint64
		ticks uint64
		warn  bool
	}{
		{name: "equal", ns: 100 * tick, ticks: 100},
		{name: "within rounding", ns: 100*tick + 3*tick, ticks: 100},
		{name: "within 5 %", ns: 1000 * tick, ticks: 1054},
		{name: "stat far above: threads missed", ns: 100 * tick, ticks: 130, warn: true},
		{name: "stat far below", ns: 100 * tick, ticks: 70, warn: true},
	}
	for _, tt := range tests {
		got := crossCheck("client", tt.ns, tt.ticks)
		if (got != "") != tt.warn {
			t.Errorf("%s: crossCheck = %q, want a warning: %v", tt.name, got, tt.warn)
		}
		if tt.warn && !strings.Contains(got, "client") {
			t.Errorf("%s: warning %q does not name the process", tt.name, got)
		}
	}
}

func TestCPURow(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name    string
		cn, ref []float64
		cnperf  string
		ratio   float64
		met     bool
	}{
		{name: "all measured", cn: []float64{14, 13, 15}, ref: []float64{20, 26, 22}, cnperf: "14.0 µs", ratio: 14.0 / 22, met: true},
		{name: "cnperf costs more", cn: []float64{24, 23, 25}, ref: []float64{20, 26, 22}, cnperf: "24.0 µs", ratio: 24.0 / 22},
		{name: "some not measured", cn: []float64{14, nan, 12}, ref: []float64{20, 26, 22}, cnperf: "13.0 µs (2 of 3 runs)", ratio: 13.0 / 22, met: true},
		{name: "none measured", cn: []float64{nan, nan}, ref: []float64{20, 26}, cnperf: "not measured", ratio: nan},
	}
	for _, tt := range tests {
		r := cpuRow("unpinned", "rr TCP 64 B, client CPU per transaction", "sockperf", tt.cn, tt.ref)
		if r.cnperf != tt.cnperf || r.met != tt.met || !(r.ratio == tt.ratio || math.IsNaN(r.ratio) && math.IsNaN(tt.ratio)) {
			t.Errorf("%s: got %q ratio %v met %v; want %q %v %v", tt.name, r.cnperf, r.ratio, r.met, tt.cnperf, tt.ratio, tt.met)
		}
	}
}
