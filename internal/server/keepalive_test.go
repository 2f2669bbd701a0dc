package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

// TestScaledKeepalive: the period keeps n sessions' keep-alives under the
// budget, in steps of half the lower bound, within the bounds.
func TestScaledKeepalive(t *testing.T) {
	const lo, hi = 10 * time.Second, 60 * time.Second
	for _, c := range []struct {
		n      int
		budget float64
		want   time.Duration
	}{
		{0, 200, lo},
		{1, 200, lo},
		{2000, 200, lo},               // 10 s exactly
		{2001, 200, 15 * time.Second}, // just over: the next step
		{5000, 200, 25 * time.Second},
		{11112, 200, 60 * time.Second}, // 100,000 agents on 9 replicas
		{12000, 200, 60 * time.Second},
		{1_000_000, 200, hi},
		{100_000, 2000, 50 * time.Second},
		{10, 0, lo},         // no budget: the lower bound
		{1 << 62, 1e-9, hi}, // no overflow
	} {
		got := scaledKeepalive(c.n, c.budget, lo, hi)
		if got != c.want {
			t.Errorf("scaledKeepalive(%d, %v) = %v, want %v", c.n, c.budget, got, c.want)
		}
		if c.budget > 0 && got < hi && float64(c.n)/got.Seconds() > c.budget {
			t.Errorf("scaledKeepalive(%d, %v) = %v: %.0f keep-alives a second, over the budget", c.n, c.budget, got, float64(c.n)/got.Seconds())
		}
	}
	for n := 1; n < 30000; n += 97 {
		if a, b := scaledKeepalive(n, 200, lo, hi), scaledKeepalive(n+97, 200, lo, hi); b < a {
			t.Fatalf("the period shrank as sessions grew: %d → %v, %d → %v", n, a, n+97, b)
		}
	}
}

// TestKeepaliveOptions: a fixed period is asked whatever the sessions;
// bad values are refused by name.
func TestKeepaliveOptions(t *testing.T) {
	s := &Server{opts: Options{SessionKeepalive: 3 * time.Second}, keepaliveLo: KeepaliveMin, keepaliveHi: KeepaliveMax}
	if got := s.keepaliveFor(1_000_000); got != 3*time.Second {
		t.Errorf("fixed period: %v, want 3s", got)
	}
	for _, o := range []Options{{SessionKeepalive: -time.Second}, {SessionKeepalive: time.Millisecond}, {SessionKeepaliveBudget: -1}} {
		if err := checkKeepalive(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := checkKeepalive(Options{}); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
}

// TestKeepaliveRaisedNoFalseOffline: as sessions are added, the period
// asked of the open ones grows past their first period's silence limit;
// the agents take the longer period (fewer keep-alives), and no session
// is ended for its silence nor any agent marked offline by the reaper.
func TestKeepaliveRaisedNoFalseOffline(t *testing.T) {
	f := sessionFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	// 1 session: 100 ms (silence 1.2 s); 20 sessions: 2 s, longer than
	// that silence.
	f.srv.opts.SessionKeepaliveBudget = 10
	f.srv.keepaliveLo, f.srv.keepaliveHi = 100*time.Millisecond, 2*time.Second
	f.srv.opts.OfflineAfter = 500 * time.Millisecond
	const n = 20
	const hi = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var downs, kas atomic.Int64
	first := make(chan *client.Session, 1)
	up := make(chan struct{}, n)
	hold := func(i int, onKA func(time.Duration, error)) {
		uid := "uid-" + string(rune('a'+i))
		go f.agent.HoldSession(ctx, client.SessionLoop{
			PodUID: uid,
			Hello:  func() api.Heartbeat { return helloOf(uid, "pod-"+uid, "10.244.1."+string(rune('0'+i%10)), "node-1") },
			OnUp: func(s *client.Session) {
				if i == 0 {
					first <- s
				}
				up <- struct{}{}
			},
			OnDown: func(err error, _ bool) {
				if ctx.Err() == nil {
					downs.Add(1)
					t.Logf("session %s ended: %v", uid, err)
				}
			},
			OnKeepalive: onKA,
		})
	}
	hold(0, func(time.Duration, error) { kas.Add(1) })
	s0 := <-first
	if p := s0.KeepalivePeriod(); p != 100*time.Millisecond {
		t.Fatalf("the first session was asked %v, want 100ms", p)
	}
	<-up
	for i := 1; i < n; i++ {
		hold(i, nil)
		<-up
	}
	if err := f.srv.flushBeats(ctx); err != nil {
		t.Fatal(err)
	}
	// The sweeper asks the open sessions for the longer period.
	deadline := time.Now().Add(5 * time.Second)
	for s0.KeepalivePeriod() != hi && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p := s0.KeepalivePeriod(); p != hi {
		t.Fatalf("the first session's period is %v 5 s after %d sessions opened, want %v", p, n, hi)
	}
	time.Sleep(hi) // the keep-alive ticking at the old period has passed
	kas.Store(0)
	start := time.Now()
	offline := 0
	for time.Since(start) < 3*hi+time.Second { // past two of the old silence limits and more
		res, err := f.srv.Reap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		offline += len(res.Offline)
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	if d := downs.Load(); d != 0 {
		t.Errorf("%d sessions ended after the period grew", d)
	}
	if offline != 0 {
		t.Errorf("the reaper marked %d agents offline", offline)
	}
	if got := f.srv.Sessions(); got != n {
		t.Errorf("%d sessions open, want %d", got, n)
	}
	// Keep-alives at the new period: a few, not one every 100 ms.
	if k, most := kas.Load(), int64(took/hi)+2; k > most {
		t.Errorf("the first agent sent %d keep-alives in %v, want at most %d (every %v)", k, took.Round(time.Millisecond), most, hi)
	}
	if ttl := f.srv.presenceTTL(); ttl < 2*hi+5*time.Second {
		t.Errorf("presence lease TTL %v, want at least two of the longest period asked and 5 s", ttl)
	}
}
