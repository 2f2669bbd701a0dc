package web

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Login attempts are rate limited: each client address may fail
// loginMaxFailures times per loginWindow, and all clients together
// loginMaxFailuresAll times (so a spread-out guess campaign is slowed as
// well); over that, a login is answered 429 with Retry-After and the token
// is not even compared. A success clears the address's failures.
const (
	loginWindow         = time.Minute
	loginMaxFailures    = 5
	loginMaxFailuresAll = 100
	loginMaxClients     = 10000 // addresses remembered; the oldest go first
)

type failures struct {
	start time.Time // the window's start
	n     int
}

// loginLimiter counts failed logins per client address and in all.
type loginLimiter struct {
	now func() time.Time

	mu    sync.Mutex // guards every field below
	by    map[string]*failures
	total failures
}

func newLoginLimiter(now func() time.Time) *loginLimiter {
	return &loginLimiter{now: now, by: map[string]*failures{}}
}

// clientAddr is the request's client IP (the port dropped).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// current returns f reset when its window has passed.
func (l *loginLimiter) current(f *failures, now time.Time) *failures {
	if now.Sub(f.start) >= loginWindow {
		f.start, f.n = now, 0
	}
	return f
}

// allow reports whether addr may try a login now; when not, after how
// long it may.
func (l *loginLimiter) allow(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if t := l.current(&l.total, now); t.n >= loginMaxFailuresAll {
		return false, t.start.Add(loginWindow).Sub(now)
	}
	if f := l.by[addr]; f != nil {
		if f = l.current(f, now); f.n >= loginMaxFailures {
			return false, f.start.Add(loginWindow).Sub(now)
		}
	}
	return true, 0
}

// failed counts a failed login from addr.
func (l *loginLimiter) failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.current(&l.total, now).n++
	f := l.by[addr]
	if f == nil {
		if len(l.by) >= loginMaxClients {
			l.pruneLocked(now)
		}
		f = &failures{start: now}
		l.by[addr] = f
	}
	l.current(f, now).n++
}

// succeeded forgets addr's failures.
func (l *loginLimiter) succeeded(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.by, addr)
}

// pruneLocked drops the addresses whose window passed, and, if that frees
// nothing, the oldest.
func (l *loginLimiter) pruneLocked(now time.Time) {
	var oldest string
	for a, f := range l.by {
		if now.Sub(f.start) >= loginWindow {
			delete(l.by, a)
		} else if oldest == "" || f.start.Before(l.by[oldest].start) {
			oldest = a
		}
	}
	if len(l.by) >= loginMaxClients && oldest != "" {
		delete(l.by, oldest)
	}
}
