package main

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		same, periods int
		want          string
	}{
		{same: 220, periods: 220, want: oneCPU},
		{same: 176, periods: 220, want: oneCPU}, // 80 %
		{same: 175, periods: 220, want: mixed},  // 79.5 %
		{same: 110, periods: 220, want: mixed},
		{same: 45, periods: 220, want: mixed},  // 20.5 %
		{same: 44, periods: 220, want: twoCPU}, // 20 %
		{same: 0, periods: 220, want: twoCPU},
		{same: 0, periods: 0, want: unplaced},
	}
	for _, tt := range tests {
		if got := classify(tt.same, tt.periods); got != tt.want {
			t.Errorf("classify(%d, %d) = %s, want %s", tt.same, tt.periods, got, tt.want)
		}
	}
}

func TestMedianRuns(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		v    []float64
		want []int
	}{
		{name: "odd", v: []float64{50, 15, 52, 14, 16}, want: []int{4}},
		{name: "even: the middle two", v: []float64{50, 15, 52, 14}, want: []int{1, 0}},
		{name: "NaN left out", v: []float64{nan, 15, 52, nan, 16}, want: []int{4}},
		{name: "one", v: []float64{7}, want: []int{0}},
		{name: "none", v: []float64{nan}, want: nil},
	}
	for _, tt := range tests {
		got := medianRuns(tt.v)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: medianRuns(%v) = %v, want %v", tt.name, tt.v, got, tt.want)
		}
		if len(got) > 0 { // the runs named are the ones the median is made of
			m := 0.0
			for _, i := range got {
				m += tt.v[i] / float64(len(got))
			}
			if want, _ := medianMeasured(tt.v); m != want {
				t.Errorf("%s: runs %v average %v, median is %v", tt.name, got, m, want)
			}
		}
	}
}

func TestPlacementsDiffer(t *testing.T) {
	// run builds a run with p50 and a placement: same of 100 periods.
	run := func(p50 float64, same int) rrRun {
		return rrRun{p50us: p50, tps: 1e6 / p50, w: watchResult{window: 1, periods: 100, same: same}}
	}
	p50 := func(r rrRun) float64 { return r.p50us }
	unmeasured := rrRun{p50us: 15, w: watchResult{err: errors.New("ended early")}}
	tests := []struct {
		name   string
		cn, sp []rrRun
		want   string // "" when no line is due, else a part of it
	}{
		{name: "both one-CPU", cn: []rrRun{run(15, 99), run(16, 97), run(14, 100)}, sp: []rrRun{run(14, 95), run(15, 98), run(60, 2)}},
		{name: "cnperf one-CPU, sockperf two-CPU",
			cn:   []rrRun{run(15, 99), run(16, 97), run(14, 100)},
			sp:   []rrRun{run(52, 1), run(15, 98), run(60, 2)},
			want: "cnperf run 1 (one-CPU), sockperf run 1 (two-CPU); the ratio compares placements, not loops"},
		{name: "a mixed run in the middle",
			cn:   []rrRun{run(15, 99), run(30, 50), run(14, 100), run(55, 0), run(40, 3)},
			sp:   []rrRun{run(52, 1), run(50, 5), run(60, 2), run(15, 98), run(55, 0)},
			want: "cnperf run 2 (mixed), sockperf run 1 (two-CPU)"},
		{name: "even count: both middle runs named", cn: []rrRun{run(15, 99), run(55, 0), run(14, 100), run(50, 1)},
			sp:   []rrRun{run(52, 1), run(50, 5), run(60, 2), run(15, 98)},
			want: "cnperf runs 1, 4 (one-CPU, two-CPU), sockperf runs 1, 2 (two-CPU)"},
		{name: "an unmeasured run's placement is unknown", cn: []rrRun{unmeasured}, sp: []rrRun{run(15, 99)},
			want: "cnperf run 1 (unknown), sockperf run 1 (one-CPU)"},
	}
	for _, tt := range tests {
		got := placementsDiffer(tt.cn, tt.sp, p50)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestPlacementSummary(t *testing.T) {
	runs := []rrRun{
		{w: watchResult{periods: 200, same: 198}},
		{w: watchResult{periods: 200, same: 4}},
		{w: watchResult{err: errors.New("ended early")}},
		{w: watchResult{periods: 200, same: 197}},
	}
	want := "99 % 2 % – 98 % (one-CPU 2, two-CPU 1, unknown 1)"
	if got := placementSummary(runs); got != want {
		t.Errorf("placementSummary = %q, want %q", got, want)
	}
}

func TestTimeline(t *testing.T) {
	marks := func(pattern ...int) []bool { // pairs of (count, same 0/1)
		var m []bool
		for i := 0; i < len(pattern); i += 2 {
			for range pattern[i] {
				m = append(m, pattern[i+1] == 1)
			}
		}
		return m
	}
	alternating := make([]bool, 220)
	for i := range alternating {
		alternating[i] = i%2 == 0
	}
	tests := []struct {
		name  string
		marks []bool
		want  string
	}{
		{name: "one-CPU throughout", marks: marks(220, 1), want: "9999999999"},
		{name: "mode change half way", marks: marks(110, 1, 110, 0), want: "9999900000"},
		{name: "back and forth", marks: alternating, want: "5555555555"},
		{name: "uneven count: parts of 2-3 periods", marks: marks(15, 0, 8, 1), want: "0000003999"},
		{name: "too few periods", marks: marks(9, 1), want: ""},
	}
	for _, tt := range tests {
		if got := timeline(tt.marks); got != tt.want {
			t.Errorf("%s: timeline = %q, want %q", tt.name, got, tt.want)
		}
	}
}
