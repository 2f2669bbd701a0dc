package queuewatch

import (
	"math/bits"
	"slices"
)

// hist counts a link's nonzero backlog samples in buckets about 3 % wide
// (32 per power of two), so a watch of any length keeps a few dozen
// counters per busy link and still gives the median backlog within about
// 1.6 %. The zero samples are the watch's samples less the counted ones.
type hist map[uint32]int

// mantBits is the bits of a backlog kept beside its power of two.
const mantBits = 5

// bucket is the bucket of v > 0: its power of two and the next mantBits
// bits; values below 2^mantBits are their own bucket.
func bucket(v uint64) uint32 {
	e := bits.Len64(v) - 1
	if e < mantBits {
		return uint32(v)
	}
	return uint32(e-mantBits+1)<<mantBits | uint32(v>>(e-mantBits))&(1<<mantBits-1)
}

// mid is the middle of bucket b's values.
func mid(b uint32) float64 {
	if b < 1<<mantBits {
		return float64(b)
	}
	shift := b>>mantBits - 1
	lo := uint64(1<<mantBits|b&(1<<mantBits-1)) << shift
	return float64(lo) + float64(uint64(1)<<shift-1)/2
}

func (h hist) add(v uint64) {
	if v > 0 {
		h[bucket(v)]++
	}
}

// median is the median of samples values whose nonzero ones h counted.
func (h hist) median(samples int) float64 {
	n := 0
	for _, c := range h {
		n += c
	}
	rank := (samples + 1) / 2 // the lower median's 1-based rank
	seen := samples - n       // the zeros come first
	if rank <= seen {
		return 0
	}
	keys := make([]uint32, 0, len(h))
	for b := range h {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	for _, b := range keys {
		if seen += h[b]; rank <= seen {
			return mid(b)
		}
	}
	return 0
}
