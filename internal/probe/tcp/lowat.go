package tcp

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The receiver's wake-ups. A TCP reader is woken (here: Go's poller marks
// the socket readable) whenever any data arrives, which at tens of Gbit/s
// over a veth is for every few segments: each wake-up a pass through the
// poller and the scheduler, for a read of a few KB. SO_RCVLOWAT tells the
// kernel to wake the reader only once that many bytes are queued (the end
// of the stream wakes it too). A fixed mark would hold a slow stream's
// bytes back (a stream that drops from 1 Gbit/s to 1 Mbit/s, under a
// policer, would be read in lumps seconds apart, and its interval samples
// would be wrong), so the mark follows each stream's rate: every
// lowatEvery it is set to lowatSpan of what the stream read in the last
// lowatEvery, between 1 byte and lowatMax, and to 1 byte when the stream
// read nothing. Bytes are then read at most about lowatEvery late, a
// fraction of the shortest interval (100 ms). Measured (docs/probes.md,
// "TCP: the receiver's low-water mark"), over a veth, unpinned: one stream's
// receiver went from 64-67 % of a CPU to 47-49 %, and the sender, with the
// CPU that freed, from 25.7-28.1 to 25.4-31.7 Gbit/s.
const (
	lowatEvery = 10 * time.Millisecond
	lowatSpan  = 5 * time.Millisecond
	lowatMax   = 256 << 10
)

// lowWater keeps the receive low-water mark of one side's streams.
type lowWater struct {
	rcs   []syscall.RawConn // nil where the connection has none
	mark  []int             // the mark set, 0: the kernel's default (1)
	prev  []int64           // each stream's count at the last look
	count func(i int) int64 // bytes read so far on stream i
}

func newLowWater(conns []net.Conn, count func(int) int64) *lowWater {
	w := &lowWater{rcs: make([]syscall.RawConn, len(conns)), mark: make([]int, len(conns)),
		prev: make([]int64, len(conns)), count: count}
	for i, c := range conns {
		if rc, err := rawConn(c); err == nil {
			w.rcs[i] = rc
		}
	}
	return w
}

// want is the mark for a stream that read n bytes in the last lowatEvery.
func want(n int64) int {
	m := n * int64(lowatSpan) / int64(lowatEvery)
	return int(min(max(m, 1), lowatMax))
}

// look sets each stream's mark from what it read since the last look. A
// mark within a quarter of the one set is left alone (no system call).
func (w *lowWater) look() {
	for i, rc := range w.rcs {
		if rc == nil {
			continue
		}
		n := w.count(i)
		m := want(n - w.prev[i])
		w.prev[i] = n
		cur := max(w.mark[i], 1)
		if m == cur || (m > cur-cur/4 && m < cur+cur/4) {
			continue
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, m)
		}); err != nil || serr != nil {
			w.rcs[i] = nil // closed, or a kernel without it: leave it be
			continue
		}
		w.mark[i] = m
	}
}

// run looks every lowatEvery until done is closed.
func (w *lowWater) run(done <-chan struct{}) {
	t := time.NewTicker(lowatEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			w.look()
		}
	}
}
