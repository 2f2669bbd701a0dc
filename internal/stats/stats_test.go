package stats

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestSummarize(t *testing.T) {
	tests := []struct {
		name                 string
		in                   []float64
		min, avg, max, stdev float64
		p50, p90, p99        float64
	}{
		// Hand-computed: mean 3, population variance (4+1+0+1+4)/5 = 2.
		{"five", []float64{5, 1, 3, 2, 4}, 1, 3, 5, math.Sqrt2, 3, 5, 5},
		// Ten values 1..10: nearest rank p50 = 5th = 5, p90 = 9th = 9, p99 = 10th.
		{"ten", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 1, 5.5, 10, math.Sqrt(8.25), 5, 9, 10},
		{"one", []float64{0.25}, 0.25, 0.25, 0.25, 0, 0.25, 0.25, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(tt.in)
			for _, c := range []struct {
				what      string
				got, want float64
			}{{"min", s.Min, tt.min}, {"avg", s.Avg, tt.avg}, {"max", s.Max, tt.max}, {"stdev", s.Stdev, tt.stdev},
				{"p50", s.P50, tt.p50}, {"p90", s.P90, tt.p90}, {"p99", s.P99, tt.p99}} {
				if !near(c.got, c.want, 1e-9) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if s.Count != int64(len(tt.in)) {
				t.Errorf("count = %d, want %d", s.Count, len(tt.in))
			}
		})
	}
	if s := Summarize(nil); s.Count != 0 || s.Max != 0 {
		t.Errorf("empty summary = %+v", s)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	// 100 values 1..100: the p-th percentile is p itself.
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(i + 1)
	}
	for _, p := range []float64{1, 25, 50, 90, 99, 100} {
		if got := Percentile(v, p); got != p {
			t.Errorf("p%v = %v, want %v", p, got, p)
		}
	}
	if got := Percentile(v, 99.9); got != 100 {
		t.Errorf("p99.9 = %v, want 100", got)
	}
}

func TestRecorderMatchesExactWithinHDRError(t *testing.T) {
	r := NewRecorder()
	var vals []float64
	for i := 1; i <= 10000; i++ {
		ns := int64(i) * 1000 // 1 µs .. 10 ms
		r.Record(ns)
		vals = append(vals, float64(ns))
	}
	got, want := r.Summary(1e-6), Summarize(vals)
	for _, c := range []struct {
		what      string
		got, want float64
	}{{"min", got.Min, want.Min * 1e-6}, {"max", got.Max, want.Max * 1e-6}, {"avg", got.Avg, want.Avg * 1e-6},
		{"p50", got.P50, want.P50 * 1e-6}, {"p99", got.P99, want.P99 * 1e-6}, {"stdev", got.Stdev, want.Stdev * 1e-6}} {
		if !near(c.got, c.want, c.want*0.002) { // HDR with 3 significant digits
			t.Errorf("%s = %v, want %v ± 0.2%%", c.what, c.got, c.want)
		}
	}
	other := NewRecorder()
	other.Record(20e6)
	r.Merge(other)
	if s := r.Summary(1e-6); s.Max != 20 || s.Count != 10001 {
		t.Errorf("after merge: max %v count %d, want 20 and 10001", s.Max, s.Count)
	}
}

func TestJitterRFC3550(t *testing.T) {
	// Packets sent every 10 ms; transit 1, 3, 2, 2 ms.
	// D: |2| then |-1| then |0| (ms). J: 0 → 2/16 = 0.125 → 0.125 + (1-0.125)/16
	// = 0.1796875 → 0.1796875 + (0-0.1796875)/16 = 0.168457...
	var j Jitter
	const ms = int64(1e6)
	transit := []int64{1, 3, 2, 2}
	var got float64
	for i, tr := range transit {
		tx := int64(i) * 10 * ms
		got = j.Add(tx, tx+tr*ms)
	}
	want := (0.1796875 + (0-0.1796875)/16) * 1e6
	if !near(got, want, 1e-6) {
		t.Fatalf("jitter = %v ns, want %v", got, want)
	}
	var c Jitter
	for i := 0; i < 100; i++ {
		c.Add(int64(i)*ms, int64(i)*ms+5*ms)
	}
	if c.Value() != 0 {
		t.Errorf("constant transit gives jitter %v, want 0", c.Value())
	}
}

func TestSeqTracker(t *testing.T) {
	tests := []struct {
		name                 string
		arrivals             []uint64
		sent                 int64
		recv, lost, ooo, dup int64
	}{
		{"in order", []uint64{0, 1, 2, 3}, 4, 4, 0, 0, 0},
		{"one lost", []uint64{0, 1, 3}, 4, 3, 1, 0, 0},
		{"tail lost", []uint64{0, 1}, 4, 2, 2, 0, 0},
		{"swap", []uint64{0, 2, 1, 3}, 4, 4, 0, 1, 0},
		{"late after two", []uint64{1, 2, 0}, 3, 3, 0, 1, 0},
		{"duplicate", []uint64{0, 1, 1, 2}, 3, 3, 0, 0, 1},
		{"duplicate of reordered", []uint64{0, 2, 1, 1, 2}, 3, 3, 0, 1, 2},
		{"reorder and loss", []uint64{3, 0, 2}, 5, 3, 2, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s SeqTracker
			for _, a := range tt.arrivals {
				s.Add(a)
			}
			if s.Received() != tt.recv || s.Lost(tt.sent) != tt.lost || s.OutOfOrder() != tt.ooo || s.Duplicates() != tt.dup {
				t.Errorf("recv %d lost %d ooo %d dup %d; want %d %d %d %d",
					s.Received(), s.Lost(tt.sent), s.OutOfOrder(), s.Duplicates(), tt.recv, tt.lost, tt.ooo, tt.dup)
			}
		})
	}
	if got := LossPct(1, 4); got != 25 {
		t.Errorf("LossPct(1,4) = %v", got)
	}
	if got := LossPct(0, 0); got != 0 {
		t.Errorf("LossPct(0,0) = %v", got)
	}
}

func TestBins(t *testing.T) {
	b := NewBins(5, 4) // [0,5) [5,10) [10,15) [15,∞)
	for _, v := range []float64{-1, 0, 4.999, 5, 9, 10, 14.9, 15, 1000} {
		b.Add(v)
	}
	want := []int64{3, 2, 2, 2}
	got := b.Counts()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("counts = %v, want %v", got, want)
		}
	}
}

// TestTrimmedMean: the mean of the lowest keep % of the values, within
// the histogram's 0.1 %.
func TestTrimmedMean(t *testing.T) {
	cases := []struct {
		name   string
		values []int64
		keep   float64
		want   float64
	}{
		{"none", nil, 95, 0},
		{"all kept", []int64{1000, 2000, 3000}, 100, 2000},
		// 100 values 1..100 µs: the lowest 95 are 1..95, mean 48.
		{"95 of 100", seq(1000, 100), 95, 48000},
		// 19 values of 1 ms and one stall of 1 s: the stall is trimmed.
		{"a stall", append(repeat(1e6, 19), 1e9), 95, 1e6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			for _, v := range tc.values {
				r.Record(v)
			}
			got := r.TrimmedMean(tc.keep, 1)
			if math.Abs(got-tc.want) > 0.002*tc.want {
				t.Errorf("TrimmedMean(%v) = %v, want %v", tc.keep, got, tc.want)
			}
		})
	}
}

func seq(step int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = step * int64(i+1)
	}
	return out
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
