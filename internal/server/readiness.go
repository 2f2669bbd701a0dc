package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// /readyz says whether the store can write, cheaply: the write probe
// (Store.CheckWrite, one small row) runs at most once per writeProbeEvery
// and its answer is kept meanwhile. A small probe can pass while larger
// writes fail (a disk nearly full: a row fits in space the database holds
// already, a result of megabytes does not), so a real write that failed
// because the store cannot write (store.CannotWrite) also makes the server
// not ready, for writeFailureHold after the last such failure. Such a
// write is answered 503 "store cannot write: ..." with Retry-After, not a
// bare internal error.
const (
	writeProbeEvery  = 2 * time.Second
	writeFailureHold = 30 * time.Second
	// writeRetryAfter is the Retry-After of a write the store refused.
	writeRetryAfter = "5"
)

// writeHealth is what the server knows about the store's writes.
type writeHealth struct {
	mu       sync.Mutex
	probedAt time.Time // the last probe (zero: none yet)
	probeErr error     // its error
	failedAt time.Time // the last write that failed for the store
	failErr  error
}

// writeReady returns why the store cannot write, or nil.
func (s *Server) writeReady(ctx context.Context) error {
	h := &s.writes
	h.mu.Lock()
	defer h.mu.Unlock()
	now := s.now()
	if h.probedAt.IsZero() || now.Sub(h.probedAt) >= writeProbeEvery || now.Before(h.probedAt) {
		err := s.st.CheckWrite(ctx)
		if ctx.Err() != nil {
			return err // the caller went away: nothing learnt
		}
		h.probedAt, h.probeErr = now, err
	}
	if h.probeErr != nil {
		return h.probeErr
	}
	if !h.failedAt.IsZero() && now.Sub(h.failedAt) < writeFailureHold {
		return fmt.Errorf("a write failed %s ago: %w", now.Sub(h.failedAt).Round(time.Second), h.failErr)
	}
	return nil
}

// storeCannotWrite records a write the store refused and returns the
// message to answer it with.
func (s *Server) storeCannotWrite(r *http.Request, err error) string {
	s.writeFailed(err)
	s.log.Error("store cannot write", "method", r.Method, "path", r.URL.Path, "err", err)
	return cannotWriteMsg(err)
}

// writeFailed records a write the store refused, a request's or a
// background job's (a lease renewal that cannot commit on a full disk
// makes the server not ready too).
func (s *Server) writeFailed(err error) {
	h := &s.writes
	h.mu.Lock()
	h.failedAt, h.failErr = s.now(), err
	h.mu.Unlock()
}

// cannotWriteMsg is the answer to a write the store refused.
func cannotWriteMsg(err error) string {
	if errors.Is(err, store.ErrCannotWrite) {
		return err.Error() // says so already
	}
	return store.ErrCannotWrite.Error() + ": " + err.Error()
}
