package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// fullStore is a store on a disk that filled up: while full, a task
// creation fails as MySQL says a full disk, and the write probe fails only
// when probeFails (a small write can still fit where a larger cannot).
type fullStore struct {
	store.Store
	full, probeFails atomic.Bool
	probes           atomic.Int32
}

func (s *fullStore) CreateTasks(ctx context.Context, runID string, ts []store.Task, now time.Time) ([]store.Task, error) {
	if s.full.Load() {
		return nil, fmt.Errorf("create tasks: insert: %w", &mysql.MySQLError{Number: 1021, Message: "Disk full (/var/lib/mysql/ibdata1); waiting for someone to free some space..."})
	}
	return s.Store.CreateTasks(ctx, runID, ts, now)
}

func (s *fullStore) CheckWrite(ctx context.Context) error {
	s.probes.Add(1)
	if s.probeFails.Load() {
		return fmt.Errorf("%w: write probe: disk full", store.ErrCannotWrite)
	}
	return s.Store.CheckWrite(ctx)
}

// TestReadyzReportsAStoreThatCannotWrite: a write the store refuses for
// a full disk is answered 503 "store cannot write: ..." with Retry-After
// (not 500 "internal error"), and /readyz says not ready, although the
// small write probe still passes, until writeFailureHold after the last
// such failure. /readyz probes at most once per writeProbeEvery, and a
// failing probe makes it not ready by itself.
func TestReadyzReportsAStoreThatCannotWrite(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	f.twoAgents()
	fs := &fullStore{Store: f.st}
	f.srv.st = fs
	ready := func(want int, wantIn string) {
		t.Helper()
		code, body := f.do("GET", "/readyz", "", nil)
		if code != want || !strings.Contains(string(body), wantIn) {
			t.Fatalf("/readyz at +%s: %d %s, want %d with %q", f.clock.Now().Sub(time.Date(2026, 4, 27, 7, 0, 0, 0, time.UTC)), code, body, want, wantIn)
		}
	}
	ready(http.StatusOK, "ready")
	ready(http.StatusOK, "ready")
	if n := fs.probes.Load(); n != 1 {
		t.Errorf("two /readyz at once made %d write probes, want 1 (kept for %s)", n, writeProbeEvery)
	}

	fs.full.Store(true)
	body, _ := json.Marshal([]api.TaskCreate{pingTask("-c 1")})
	req, _ := http.NewRequest(http.MethodPost, f.ts.URL+"/api/v1/external/task/create", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+userTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var env api.Envelope
	_ = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(env.Msg, "store cannot write: ") || !strings.Contains(env.Msg, "Disk full") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("task creation on a full disk: %d %q Retry-After %q, want 503 \"store cannot write: ...Disk full...\" with Retry-After",
			resp.StatusCode, env.Msg, resp.Header.Get("Retry-After"))
	}
	// The probe passes, the failed write counts.
	f.clock.Add(writeProbeEvery)
	ready(http.StatusServiceUnavailable, "store cannot write")
	if n := fs.probes.Load(); n != 2 {
		t.Errorf("%d write probes, want 2", n)
	}
	// Space freed: ready once the failure is writeFailureHold old.
	fs.full.Store(false)
	f.clock.Add(writeFailureHold - writeProbeEvery - time.Second)
	ready(http.StatusServiceUnavailable, "store cannot write")
	f.clock.Add(time.Second)
	ready(http.StatusOK, "ready")
	if _, err := f.user.CreateTasks(context.Background(), []api.TaskCreate{pingTask("-c 1")}); err != nil {
		t.Errorf("task creation once the disk has room: %v", err)
	}

	// A probe that fails: not ready, from the next probe on.
	fs.probeFails.Store(true)
	ready(http.StatusOK, "ready") // the answer kept from the last probe
	f.clock.Add(writeProbeEvery)
	ready(http.StatusServiceUnavailable, "store cannot write: write probe: disk full")
}

// leaseFullStore is a store whose lease renewals cannot commit (a full
// disk) while its write probe, one small row, still fits.
type leaseFullStore struct {
	store.Store
	holds atomic.Int32
}

func (s *leaseFullStore) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (store.Lease, error) {
	s.holds.Add(1)
	return store.Lease{}, fmt.Errorf("hold lease %s: commit: %w", name, &mysql.MySQLError{Number: 1021, Message: "Disk full"})
}

// TestReadyzReportsBackgroundWritesThatFail: a background job's write
// the store refuses (the leases' renewals, no request involved) makes
// /readyz not ready, as a request's does (make bench-chaos found a
// server restarted on a full disk ready while every renewal failed).
func TestReadyzReportsBackgroundWritesThatFail(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	ls := &leaseFullStore{Store: f.st}
	f.srv.st = ls
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.srv.loop(ctx, time.Millisecond, f.srv.reapIfLeader) }()
	deadline := time.Now().Add(10 * time.Second)
	for ls.holds.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if ls.holds.Load() < 2 {
		t.Fatal("the reaper's loop never renewed its lease")
	}
	code, body := f.do("GET", "/readyz", "", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "store cannot write") {
		t.Fatalf("/readyz while lease renewals fail for a full disk: %d %s, want 503 \"store cannot write\"", code, body)
	}
	f.clock.Add(writeFailureHold)
	if code, body := f.do("GET", "/readyz", "", nil); code != http.StatusOK {
		t.Errorf("/readyz %s after the last failure: %d %s, want 200", writeFailureHold, code, body)
	}
}
