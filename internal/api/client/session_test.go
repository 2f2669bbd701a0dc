package client

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// TestSessionBackoffStartsOverAfterAnEcho: a session that carried a
// keep-alive echo before it ended (its server died) is followed by a
// short wait (BackoffMin), however many sessions came before; sessions
// that end before any echo (a proxy that cannot carry them) back off
// exponentially.
func TestSessionBackoffStartsOverAfterAnEcho(t *testing.T) {
	const base = 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		echo bool   // the server echoes one keep-alive before it ends the session
		ka   string // the keep-alive period the server asks for (keepalive_s)
		// waits is a bound on the gaps between the session opens (each
		// holds the back-off, Rand being 1, plus the session's life).
		check func(gaps []time.Duration) bool
		want  string
	}{
		{"echoed: the back-off starts over", true, "0.05", func(g []time.Duration) bool { return g[len(g)-1] < 8*base }, "last gap under 800ms"},
		{"no echo: exponential", false, "0.05", func(g []time.Duration) bool { return g[len(g)-1] >= 8*base }, "last gap at least 800ms (min·2^3)"},
		// The first keep-alive goes out as the session opens, so a session
		// that ends long before its first period proved the path too.
		{"echoed before the first period: the back-off starts over", true, "60", func(g []time.Duration) bool { return g[len(g)-1] < 8*base }, "last gap under 800ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var opens []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				opens = append(opens, time.Now())
				mu.Unlock()
				rc := http.NewResponseController(w)
				if err := rc.EnableFullDuplex(); err != nil {
					t.Error(err)
					return
				}
				sc := bufio.NewScanner(r.Body)
				if !sc.Scan() { // hello
					return
				}
				w.Write([]byte(`{"type":"welcome","keepalive_s":` + tc.ka + `}` + "\n"))
				rc.Flush()
				if !tc.echo {
					return
				}
				for sc.Scan() {
					if sc.Text() == api.KeepaliveLine {
						w.Write([]byte(api.KeepaliveLine + "\n"))
						rc.Flush()
						time.Sleep(10 * time.Millisecond) // the echo reaches the agent before the end
						return
					}
				}
			}))
			defer srv.Close()
			c, err := New(srv.URL, "tok")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.HoldSession(ctx, SessionLoop{PodUID: "uid-a", Hello: func() api.Heartbeat { return api.Heartbeat{PodUID: "uid-a"} },
					BackoffMin: base, BackoffMax: 10 * time.Second, Rand: func() float64 { return 1 }})
			}()
			for {
				mu.Lock()
				n := len(opens)
				mu.Unlock()
				if n >= 5 || ctx.Err() != nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			if len(opens) < 5 {
				t.Fatalf("%d sessions opened in 10s, want 5", len(opens))
			}
			var gaps []time.Duration
			for i := 1; i < 5; i++ {
				gaps = append(gaps, opens[i].Sub(opens[i-1]).Round(time.Millisecond))
			}
			t.Logf("gaps between session opens: %v", gaps)
			if !tc.check(gaps) {
				t.Errorf("gaps %v: want %s", gaps, tc.want)
			}
		})
	}
}
