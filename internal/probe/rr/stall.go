package rr

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// stallWatch bounds the client's wait for a TCP response without a timer
// per wait. A receive timeout (SO_RCVTIMEO) makes the kernel arm and
// cancel a timer around every blocking read; that cost sits inside each
// round trip (see docs/probes.md, "rr's loops"). Instead the loop
// publishes when the transaction now waiting was sent, and a goroutine
// that wakes a few times per timeout shuts the connection down once one
// has waited longer than the timeout, which ends the blocked read.
type stallWatch struct {
	// since is the client's clock (ns) right before the latest request's
	// write, set once per transaction; 0 while the loop sleeps between
	// transactions (an interval). Between a response and the next write
	// (a fraction of a microsecond, no wait) it still holds the answered
	// request's time: clearing it there cost a second atomic store in
	// every round trip.
	since   atomic.Int64
	stalled atomic.Bool // the watch shut the connection down
	done    chan struct{}
	wg      sync.WaitGroup
}

// watchPeriod is how often the watch looks for a transaction waiting
// longer than timeout: an eighth of it (a stalled transaction fails
// within 1.125 × timeout), at least 1 ms, at most 1 s.
func watchPeriod(timeout time.Duration) time.Duration {
	return min(max(timeout/8, time.Millisecond), time.Second)
}

// watchStalls starts the watch over fd. stop must be called before fd is
// closed: it returns once the watch can no longer touch fd.
func watchStalls(fd int, timeout time.Duration) *stallWatch {
	w := &stallWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(watchPeriod(timeout))
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
			}
			s := w.since.Load()
			if s != 0 && time.Now().UnixNano()-s >= timeout.Nanoseconds() {
				w.stalled.Store(true)
				// Wakes the blocked read (it returns 0) and a blocked
				// write (EPIPE).
				_ = unix.Shutdown(fd, unix.SHUT_RDWR)
				return
			}
		}
	}()
	return w
}

func (w *stallWatch) stop() {
	close(w.done)
	w.wg.Wait()
}

// shutdownOnEnd shuts fd down when ctx ends, so that a read blocked with
// no timeout returns (0, end of stream). The returned function must be
// called before fd is closed; it returns once ctx's end can no longer
// touch fd.
type shutdownOnEnd struct {
	mu     sync.Mutex
	closed bool
	ended  atomic.Bool
}

func (s *shutdownOnEnd) fire(fd int) {
	s.ended.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	}
}

// release marks fd as about to be closed.
func (s *shutdownOnEnd) release() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
