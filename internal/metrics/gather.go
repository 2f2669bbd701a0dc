package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// sharedGatherer lets concurrent scrapes share one gathering: a scrape
// that arrives while one is under way waits for it and serves its
// answer, so scrapes (a second Prometheus, a retry after a timeout)
// never pile reads of the store on one another. The families are only
// read once gathered, so the scrapes can encode them at once.
type sharedGatherer struct {
	g prometheus.Gatherer

	mu      sync.Mutex
	cur     *gathering // the one under way, or nil
	waiting int        // scrapes waiting on cur (read by tests)
}

type gathering struct {
	done chan struct{}
	mfs  []*dto.MetricFamily
	err  error
}

// Gather gathers, or waits for the gathering under way and returns its
// answer.
func (s *sharedGatherer) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	if g := s.cur; g != nil {
		s.waiting++
		s.mu.Unlock()
		<-g.done
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
		return g.mfs, g.err
	}
	g := &gathering{done: make(chan struct{})}
	s.cur = g
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
		close(g.done)
	}()
	g.mfs, g.err = s.g.Gather()
	return g.mfs, g.err
}
