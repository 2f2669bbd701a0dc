package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/store"
)

// gatedStore holds every RegisterAgents until open is closed (or the
// write's own context ends), and records the agents it was asked to write.
type gatedStore struct {
	store.Store
	open chan struct{}

	mu      sync.Mutex // guards written, calls
	written []string
	calls   int
}

func (g *gatedStore) RegisterAgents(ctx context.Context, as []store.Agent, now time.Time) ([]store.Agent, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	for _, a := range as {
		g.written = append(g.written, a.PodUID)
	}
	g.mu.Unlock()
	return g.Store.RegisterAgents(ctx, as, now)
}

func (g *gatedStore) wasWritten(uid string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.written, uid)
}

// waitCalls waits until the store has been asked for n writes.
func (g *gatedStore) waitCalls(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.calls >= n, fmt.Sprintf("the store was asked for %d writes, want %d", g.calls, n)
	})
}

// waitUntil polls cond for up to 10 s and fails with its last word.
func waitUntil(t *testing.T, cond func() (ok bool, state string)) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(state)
		}
	}
}

func newGatedStore(t *testing.T) *gatedStore {
	t.Helper()
	return &gatedStore{Store: openSQLite(t), open: make(chan struct{})}
}

// TestRegistrarWaitsNoLongerThanItsCaller: a registration returns when its
// caller's context ends, also when it was the first of its batch (which
// used to wait for the whole transaction in the caller's goroutine), and a
// registration whose caller left before its batch was formed is not
// written at all.
func TestRegistrarWaitsNoLongerThanItsCaller(t *testing.T) {
	g := newGatedStore(t)
	r := &registrar{st: g}
	now := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	agent := func(uid string) store.Agent {
		return store.Agent{PodUID: uid, PodName: "pod-" + uid, PodIP: "10.244.1.2", NodeName: "n1", Status: store.AgentFree}
	}

	// The first registration starts a batch the store holds.
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := r.register(firstCtx, agent("first"), now)
		firstErr <- err
	}()
	g.waitCalls(t, 1)
	cancelFirst()
	select {
	case err := <-firstErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("first registration: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first registration waited for the store after its caller left")
	}

	// While that batch is held, one caller gives up and one waits.
	leftCtx, cancelLeft := context.WithCancel(context.Background())
	leftErr := make(chan error, 1)
	go func() {
		_, err := r.register(leftCtx, agent("left"), now)
		leftErr <- err
	}()
	waitErr := make(chan error, 1)
	go func() {
		_, err := r.register(context.Background(), agent("waits"), now)
		waitErr <- err
	}()
	waitUntil(t, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pending) == 2, fmt.Sprintf("%d registrations pending, want 2", len(r.pending))
	})
	cancelLeft()
	if err := <-leftErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("left registration: %v, want context.Canceled", err)
	}
	close(g.open)
	if err := <-waitErr; err != nil {
		t.Fatalf("waiting registration: %v", err)
	}
	if !g.wasWritten("waits") {
		t.Error("the registration whose caller waited was not written")
	}
	if g.wasWritten("left") {
		t.Error("the registration whose caller left before its batch was written anyway")
	}
}

// TestSessionOpenRefusedWhenStoreBehind: a session whose hello the store
// cannot record within the open budget is answered 503 with Retry-After
// while the agent still waits (not served after it gave up), and once the
// store keeps up the same agent opens its session.
//
// It uses the default budget (10 s, so it takes 20 s, in parallel with the
// package's other tests): at it the refusal is written more than
// sessionWriteTimeout (also 10 s) after the request came, so a write
// deadline set when the request came, as the handler once did, loses it;
// a shorter budget would not show that.
func TestSessionOpenRefusedWhenStoreBehind(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	const budget = DefaultSessionOpenBudget
	srv, err := New(Options{Store: g, UserToken: userTok, AgentToken: agentTok,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	hello := helloOf("uid-slow", "pod-slow", "10.244.1.30", "node-1")

	// The raw exchange, to see the status and header an agent gets.
	pr, pw := io.Pipe()
	// The request body stays open, as an agent's does; it is closed when
	// the exchange takes too long, so that a lost answer fails the test
	// instead of hanging it (the client waits for its body writer).
	rctx, rcancel := context.WithTimeout(context.Background(), budget+15*time.Second)
	defer rcancel()
	context.AfterFunc(rctx, func() { pw.Close() })
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, ts.URL+"/api/v2/agent/session?pod_uid=uid-slow", pr)
	req.Header.Set("Authorization", "Bearer "+agentTok)
	line, err := json.Marshal(api.SessionFrame{Type: api.FrameHello, Heartbeat: &hello})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = pw.Write(append(line, '\n')) }()
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("open while the store is held: no answer within %v: %v", budget+15*time.Second, err)
	}
	took := time.Since(start)
	body, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	pw.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("open while the store is held: %d %s, want 503", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" {
		t.Error("503 without Retry-After")
	}
	if !strings.Contains(string(body), "store is behind") {
		t.Errorf("body %s does not say why", body)
	}
	if took < budget || took > budget+5*time.Second {
		t.Errorf("answered after %v, want the budget %v and not much more", took, budget)
	}
	if g.wasWritten("uid-slow") {
		t.Error("the refused agent was registered anyway")
	}

	// The agent's client sees the same refusal as an error with the
	// status (so it moves to the next replica and backs off).
	ac, _ := client.New(ts.URL, agentTok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = ac.OpenSession(ctx, "uid-slow", hello, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("client open while the store is held: %v, want a 503 error", err)
	}

	close(g.open)
	s, err := ac.OpenSession(ctx, "uid-slow", hello, nil)
	if err != nil {
		t.Fatalf("open once the store keeps up: %v", err)
	}
	s.Close()
	if !g.wasWritten("uid-slow") {
		t.Error("the agent was not registered once the store kept up")
	}
}

// TestRefusalLogOneLinePerPeriod: a burst of refused opens is logged as
// one line at once and then one line per refusalLogEvery with the count
// since the last line.
func TestRefusalLogOneLinePerPeriod(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l refusalLog
	for range 5 {
		l.note(log, time.Second)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 1 || !strings.Contains(buf.String(), "refused=1 ") {
		t.Fatalf("after 5 refusals at once: %d lines %q, want one line with refused=1", lines, buf.String())
	}
	l.mu.Lock()
	l.last = l.last.Add(-refusalLogEvery - time.Second)
	l.mu.Unlock()
	l.note(log, time.Second)
	out := buf.String()
	if lines := strings.Count(out, "\n"); lines != 2 || !strings.Contains(out[strings.Index(out, "\n")+1:], "refused=5 ") {
		t.Fatalf("a period later: %d lines %q, want a second line with refused=5 (4 held back and this one)", lines, out)
	}
}
