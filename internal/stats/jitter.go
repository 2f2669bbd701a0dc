package stats

// Jitter is the RFC 3550 interarrival jitter estimator: for consecutive
// packets i, j in arrival order, D = (Rj - Ri) - (Sj - Si) and
// J += (|D| - J) / 16. Send and receive times are in nanoseconds on any
// clocks: offsets cancel out.
type Jitter struct {
	j        float64
	prevTx   int64
	prevRx   int64
	havePrev bool
}

// Add takes one packet's send and receive time and returns the jitter so
// far, in nanoseconds.
func (j *Jitter) Add(txNs, rxNs int64) float64 {
	if j.havePrev {
		d := float64((rxNs - j.prevRx) - (txNs - j.prevTx))
		if d < 0 {
			d = -d
		}
		j.j += (d - j.j) / 16
	}
	j.prevTx, j.prevRx, j.havePrev = txNs, rxNs, true
	return j.j
}

// Value returns the current jitter in nanoseconds.
func (j *Jitter) Value() float64 { return j.j }
