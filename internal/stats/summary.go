package stats

import (
	"math"
	"sort"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Summary is a distribution of values in one unit (the field's name in a
// result says which). Its JSON keys are part of cnperf's interface.
type Summary struct {
	Min   float64 `json:"min"`
	Avg   float64 `json:"avg"`
	Max   float64 `json:"max"`
	Stdev float64 `json:"stdev"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Count int64   `json:"count"`
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted values by
// the nearest-rank method: the smallest value with at least p % of the
// values at or below it. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// Summarize returns the exact summary of values: min, mean, max, population
// standard deviation (as ping's mdev-like stdev) and nearest-rank
// percentiles. values is not modified.
func Summarize(values []float64) Summary {
	n := len(values)
	if n == 0 {
		return Summary{}
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(n)
	var sq float64
	for _, v := range s {
		sq += (v - mean) * (v - mean)
	}
	return Summary{
		Min: s[0], Avg: mean, Max: s[n-1], Stdev: math.Sqrt(sq / float64(n)),
		P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99), P999: Percentile(s, 99.9),
		Count: int64(n),
	}
}

// Recorder accumulates many non-negative values (nanoseconds, say) in
// bounded memory: min, max, mean and standard deviation are exact;
// percentiles come from an HDR histogram with 3 significant digits (0.1 %
// relative error).
type Recorder struct {
	h        *hdrhistogram.Histogram
	n        int64
	sum, sq  float64 // of values, for the exact mean and stdev
	min, max int64
	clamped  int64
}

// recorderMax is the largest value a Recorder keeps exactly in its
// histogram: 1000 s in nanoseconds. Larger values are clamped for the
// percentiles (counted in Clamped) but exact in min/max/mean.
const recorderMax = int64(1000e9)

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(1, recorderMax, 3)}
}

// Record adds one value; negative values count as 0 in the histogram
// (one-way delays across unsynchronised clocks can be negative) but are
// kept exactly in min, mean and stdev.
func (r *Recorder) Record(v int64) {
	if r.n == 0 || v < r.min {
		r.min = v
	}
	if r.n == 0 || v > r.max {
		r.max = v
	}
	r.n++
	f := float64(v)
	r.sum += f
	r.sq += f * f
	hv := v
	if hv < 1 {
		hv = 1
	}
	if hv > recorderMax {
		hv = recorderMax
		r.clamped++
	}
	_ = r.h.RecordValue(hv)
}

// Merge adds another recorder's values.
func (r *Recorder) Merge(o *Recorder) {
	if o.n == 0 {
		return
	}
	if r.n == 0 || o.min < r.min {
		r.min = o.min
	}
	if r.n == 0 || o.max > r.max {
		r.max = o.max
	}
	r.n += o.n
	r.sum += o.sum
	r.sq += o.sq
	r.clamped += o.clamped
	r.h.Merge(o.h)
}

// Count returns how many values were recorded.
func (r *Recorder) Count() int64 { return r.n }

// Summary returns the distribution scaled by scale (1e-6 turns ns into ms).
func (r *Recorder) Summary(scale float64) Summary {
	if r.n == 0 {
		return Summary{}
	}
	mean := r.sum / float64(r.n)
	variance := r.sq/float64(r.n) - mean*mean
	if variance < 0 {
		variance = 0
	}
	q := func(p float64) float64 {
		v := float64(r.h.ValueAtQuantile(p))
		// Keep quantiles inside the exact range.
		v = math.Max(v, float64(r.min))
		v = math.Min(v, float64(r.max))
		return v * scale
	}
	return Summary{
		Min: float64(r.min) * scale, Avg: mean * scale, Max: float64(r.max) * scale,
		Stdev: math.Sqrt(variance) * scale,
		P50:   q(50), P90: q(90), P99: q(99), P999: q(99.9),
		Count: r.n,
	}
}

// TrimmedMean returns the mean of the lowest keepPct % of the values
// (0 < keepPct <= 100), scaled by scale: IETF responsiveness's trimmed
// mean keeps 95 %, so a few stalls do not dominate it. Each value counts
// at the middle of its histogram bucket (within 0.1 %), kept inside the
// exact minimum and maximum. It returns 0 for no values.
func (r *Recorder) TrimmedMean(keepPct, scale float64) float64 {
	if r.n == 0 || keepPct <= 0 {
		return 0
	}
	keep := int64(math.Ceil(float64(r.n) * math.Min(keepPct, 100) / 100))
	left, sum := keep, 0.0
	for _, b := range r.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		c := min(b.Count, left)
		v := math.Min(math.Max(float64(b.From+b.To)/2, float64(r.min)), float64(r.max))
		sum += float64(c) * v
		if left -= c; left == 0 {
			break
		}
	}
	return sum / float64(keep-left) * scale
}
