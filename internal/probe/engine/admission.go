package engine

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// What a connection may cost the responder before it is admitted (a
// control connection whose hello was accepted, key included; a data
// connection that named a session; another protocol's connection past its
// set-up): nothing unauthenticated may cost an agent more than a few KB or
// a few seconds.
const (
	// maxHello bounds the hello line. A real hello is under 2 KiB: the
	// spec (a few hundred bytes of JSON; a target, a source and a wire
	// watch's flow are the longest fields), a 16-digit session id and a
	// test key of at most probe.MaxTestKeyLen bytes. 8 KiB leaves room for long
	// host names without letting a stranger make the responder hold more.
	maxHello = 8 << 10
	// helloReadBuffer is the responder's read buffer on a control
	// connection: with maxHello, a hello in the reading holds at most
	// 12 KiB.
	helloReadBuffer = 4 << 10
	// helloTimeout bounds the time from accept to admission: a client
	// sends its preface and hello at once, so a few seconds cover a
	// loaded host, and a silent connection holds its slot no longer.
	helloTimeout = 5 * time.Second

	// DefaultMaxPending caps the connections awaiting admission in all,
	// DefaultMaxPendingPerSource those from one address (Responder
	// .LimitPending). A test opens its control connection and then its
	// data connections (one per stream, at most 32 by the server's
	// limits, more with iperf3 -P) in a burst from one address; 64 per
	// address admits that, and 512 in all costs at most a few MB.
	DefaultMaxPending          = 512
	DefaultMaxPendingPerSource = 64
)

// admission counts the connections awaiting admission, in all and per
// source address, and refuses one past either cap.
type admission struct {
	mu        sync.Mutex // guards all below
	max, per  int
	total     int
	bySource  map[netip.Addr]int
	refused   int64
	peakTotal int
}

func newAdmission() *admission {
	return &admission{max: DefaultMaxPending, per: DefaultMaxPendingPerSource, bySource: map[netip.Addr]int{}}
}

// enter takes a slot for a connection from src; false means the caps are
// reached and the connection must be closed unread.
func (a *admission) enter(src netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.max || a.bySource[src] >= a.per {
		a.refused++
		return false
	}
	a.total++
	a.bySource[src]++
	a.peakTotal = max(a.peakTotal, a.total)
	return true
}

// leave gives src's slot back.
func (a *admission) leave(src netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if a.bySource[src]--; a.bySource[src] <= 0 {
		delete(a.bySource, src)
	}
}

// sourceOf is the address a connection counts against.
func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// PendingStats is what the responder's admission gate saw.
type PendingStats struct {
	Pending int   // connections awaiting admission now
	Peak    int   // the most at once since the start
	Refused int64 // connections closed unread for a full gate
}

// LimitPending sets the caps on connections awaiting admission: total in
// all, perSource from one address (0 keeps a default). Past either, a new
// connection is closed at once without being read. Call it before Serve.
func (r *Responder) LimitPending(total, perSource int) {
	r.pending.mu.Lock()
	defer r.pending.mu.Unlock()
	if total > 0 {
		r.pending.max = total
	}
	if perSource > 0 {
		r.pending.per = perSource
	}
}

// Pending reports the admission gate's counts.
func (r *Responder) Pending() PendingStats {
	r.pending.mu.Lock()
	defer r.pending.mu.Unlock()
	return PendingStats{Pending: r.pending.total, Peak: r.pending.peakTotal, Refused: r.pending.refused}
}
