package metrics

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// blockingStore holds every ListAgents (a scrape's first read) until
// released, counting them.
type blockingStore struct {
	store.Store
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (b *blockingStore) ListAgents(ctx context.Context, f store.AgentFilter) ([]store.Agent, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	<-b.release
	return b.Store.ListAgents(ctx, f)
}

func (b *blockingStore) reads() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// TestConcurrentScrapesShareOneGathering: scrapes that arrive while one
// is reading the store wait for it and serve its answer; the store is
// read once for all of them, and a scrape after it reads afresh.
func TestConcurrentScrapesShareOneGathering(t *testing.T) {
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs := &blockingStore{Store: st, release: make(chan struct{})}
	e := New(bs, Options{})
	h := e.Handler()
	const scrapes = 8
	bodies := make([]string, scrapes)
	codes := make([]int, scrapes)
	var wg sync.WaitGroup
	for i := range scrapes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := httptest.NewRecorder()
			h.ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
			codes[i], bodies[i] = rw.Code, rw.Body.String()
		}()
	}
	// Until every scrape either waits on the one under way or is held
	// in a store read of its own.
	deadline := time.Now().Add(time.Minute)
	for {
		e.gatherer.mu.Lock()
		waiting := e.gatherer.waiting
		e.gatherer.mu.Unlock()
		if waiting == scrapes-1 || bs.reads() == scrapes {
			break
		}
		if time.Now().After(deadline) {
			close(bs.release)
			wg.Wait()
			t.Fatalf("after a minute %d scrapes wait and %d read the store, of %d", waiting, bs.reads(), scrapes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(bs.release)
	wg.Wait()
	if got := bs.reads(); got != 1 {
		t.Errorf("%d concurrent scrapes read the store %d times, want once", scrapes, got)
	}
	for i := range scrapes {
		if codes[i] != 200 || bodies[i] != bodies[0] {
			t.Errorf("scrape %d: status %d, same answer as the first: %v", i, codes[i], bodies[i] == bodies[0])
		}
	}
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
	if got := bs.reads(); rw.Code != 200 || got != 2 {
		t.Errorf("a scrape after them: status %d, store read %d times in all; want 200 and a read of its own", rw.Code, got)
	}
}
