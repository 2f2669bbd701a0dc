package rr

import "time"

// wallClock reads the wall clock in ns since the epoch, the clock of the
// kernel's receive timestamps, at half the cost of time.Now: time.Now reads
// the wall and the monotonic clock (two vDSO calls), wallClock only the
// monotonic one, added to a wall reading taken at sync. The two clocks run
// at one rate (NTP's frequency corrections apply to both); only a step of
// the wall clock (settimeofday, an NTP step) parts them, and now follows a
// step within resyncEvery readings, as an rr transaction spanning a step
// would have been wrong with time.Now too. One goroutine's.
type wallClock struct {
	base time.Time // a time.Now reading: wall and monotonic
	wall int64     // base's wall time, ns since the epoch
	n    uint32
	last int64 // the latest reading (yielder's clock)
}

// resyncEvery readings wallClock takes the wall clock again: tens of
// milliseconds of back-to-back transactions.
const resyncEvery = 4096

func newWallClock() *wallClock {
	c := &wallClock{}
	c.sync()
	return c
}

func (c *wallClock) sync() {
	c.base = time.Now()
	c.wall = c.base.UnixNano()
	c.last = c.wall
}

// now returns the wall clock in ns since the epoch.
func (c *wallClock) now() int64 {
	c.n++
	if c.n%resyncEvery == 0 {
		c.sync()
	}
	c.last = c.wall + int64(time.Since(c.base))
	return c.last
}
