package queuewatch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMedian: the histogram's median of backlog samples (zeros among
// them) is the exact one within 1.6 %, small values exactly.
func TestMedian(t *testing.T) {
	sawtooth := func(n int) []uint64 { // a FIFO between 70 % and 100 % of 250,000 B, empty a fifth of the time
		r := rand.New(rand.NewPCG(1, 2))
		out := make([]uint64, n)
		for i := range out {
			if r.IntN(5) > 0 {
				out[i] = uint64(175000 + r.IntN(75001))
			}
		}
		return out
	}
	cases := []struct {
		name    string
		samples []uint64
	}{
		{"all zero", []uint64{0, 0, 0}},
		{"mostly zero", []uint64{0, 0, 5000}},
		{"small exact", []uint64{3, 0, 7, 31, 9}},
		{"one", []uint64{123457}},
		{"powers of two", []uint64{1 << 10, 1 << 20, 1 << 30, 1 << 40, 1<<63 + 1}},
		{"sawtooth", sawtooth(10001)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := hist{}
			for _, v := range tc.samples {
				h.add(v)
			}
			sorted := slices.Clone(tc.samples)
			slices.Sort(sorted)
			want := float64(sorted[(len(sorted)-1)/2])
			got := h.median(len(tc.samples))
			if math.Abs(got-want) > 0.016*want || (want < 32 && got != want) {
				t.Errorf("median %v, want %v within 1.6 %%", got, want)
			}
		})
	}
}

// TestBucket: every value falls in a bucket whose middle is within 1.6 %
// of it, and buckets grow with the values.
func TestBucket(t *testing.T) {
	prev := uint32(0)
	for _, v := range []uint64{1, 2, 31, 32, 33, 63, 64, 65, 1000, 1499, 1500, 65535, 250000, 1 << 32, math.MaxUint64} {
		b := bucket(v)
		if b < prev {
			t.Errorf("bucket(%d) = %d below the previous value's %d", v, b, prev)
		}
		prev = b
		if m := mid(b); math.Abs(m-float64(v)) > 0.016*float64(v) {
			t.Errorf("value %d: bucket %d's middle %v is more than 1.6 %% off", v, b, m)
		}
	}
}
