package web

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Login attempts are rate limited per source: each client address (an
// IPv6 client by its /64, which one host usually holds whole) may fail
// loginMaxFailures times per loginWindow; over that, its logins are
// answered 429 with Retry-After and the token is not even compared. A
// success clears the source's failures. There is no limit over all
// sources: it would let a stranger lock every user out (failures from
// many addresses would refuse the right token everywhere); the user token
// is what resists a spread-out guess campaign. The table of sources is
// bounded (loginMaxClients; the oldest go first).
const (
	loginWindow      = time.Minute
	loginMaxFailures = 5
	loginMaxClients  = 10000
)

type failures struct {
	start time.Time // the window's start
	n     int
}

// loginLimiter counts failed logins per client source.
type loginLimiter struct {
	now func() time.Time

	mu sync.Mutex // guards by
	by map[string]*failures
}

func newLoginLimiter(now func() time.Time) *loginLimiter {
	return &loginLimiter{now: now, by: map[string]*failures{}}
}

// clientAddr is the key of the request's client: its IP (the port
// dropped), an IPv6 address by its /64 prefix.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return sourceKey(host)
}

// sourceKey maps an address to the source it is limited as.
func sourceKey(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return a.String()
	}
	return p.String()
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

// pruneLocked drops the sources whose window passed and, if that frees
// less than a tenth of the table, the oldest ones until it does (so a
// full table of fresh sources costs one scan per tenth, not per login).
func (l *loginLimiter) pruneLocked(now time.Time) {
	for a, f := range l.by {
		if now.Sub(f.start) >= loginWindow {
			delete(l.by, a)
		}
	}
	keep := loginMaxClients - loginMaxClients/10
	if len(l.by) <= keep {
		return
	}
	type aged struct {
		addr  string
		start time.Time
	}
	all := make([]aged, 0, len(l.by))
	for a, f := range l.by {
		all = append(all, aged{a, f.start})
	}
	slices.SortFunc(all, func(x, y aged) int { return x.start.Compare(y.start) })
	for _, e := range all[:len(all)-keep] {
		delete(l.by, e.addr)
	}
}
