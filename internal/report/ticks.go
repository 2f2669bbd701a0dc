package report

import "math"

// niceStep returns a step of 1, 2 or 5 times a power of ten that divides
// span into about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n < 1 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	default:
		return 10 * p
	}
}

// niceRange widens [lo, hi] to multiples of a nice step and returns the
// tick values (about n of them).
func niceRange(lo, hi float64, n int) (float64, float64, []float64) {
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		if hi == 0 {
			hi = 1
		} else {
			pad := math.Abs(hi) * 0.1
			lo, hi = lo-pad, hi+pad
		}
	}
	step := niceStep(hi-lo, n)
	nlo := math.Floor(lo/step) * step
	nhi := math.Ceil(hi/step) * step
	var ticks []float64
	for i := 0; ; i++ {
		v := nlo + float64(i)*step
		if v > nhi+step/2 || i > 100 {
			break
		}
		// Clean floating noise (0.30000000000000004).
		ticks = append(ticks, math.Round(v/step)*step)
	}
	return nlo, nhi, ticks
}

// tickLabel formats a tick value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	if v == 0 {
		return "0"
	}
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return formatFixed(v, decimals)
}
