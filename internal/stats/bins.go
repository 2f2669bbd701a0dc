package stats

import "math"

// Bins is a histogram of fixed-width bins starting at zero, like iperf2's
// --udp-histogram: bin i holds values in [i*w, (i+1)*w); values below zero
// go to bin 0 and values beyond the last bin go to the last bin.
type Bins struct {
	width  float64
	counts []int64
}

// NewBins returns n bins of width w (both must be positive).
func NewBins(w float64, n int) *Bins {
	if w <= 0 || n <= 0 {
		panic("stats.NewBins: width and count must be positive")
	}
	return &Bins{width: w, counts: make([]int64, n)}
}

// Add counts v.
func (b *Bins) Add(v float64) {
	i := 0
	if v > 0 {
		f := math.Floor(v / b.width)
		if f >= float64(len(b.counts)-1) {
			i = len(b.counts) - 1
		} else {
			i = int(f)
		}
	}
	b.counts[i]++
}

// Width returns the bin width.
func (b *Bins) Width() float64 { return b.width }

// Counts returns a copy of the counts.
func (b *Bins) Counts() []int64 { return append([]int64(nil), b.counts...) }
