package metrics_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/store"
)

// countingStore counts the store reads a scrape makes, and the schedule
// run summaries among what they return.
type countingStore struct {
	store.Store
	mu                 sync.Mutex
	queries, summaries int
}

func (c *countingStore) count(summaries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries++
	c.summaries += summaries
}

func (c *countingStore) reads() (queries, summaries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries, c.summaries
}

func (c *countingStore) ListAgents(ctx context.Context, f store.AgentFilter) ([]store.Agent, error) {
	c.count(0)
	return c.Store.ListAgents(ctx, f)
}

func (c *countingStore) ListTasks(ctx context.Context, f store.TaskFilter, p store.Page) ([]store.Task, int, error) {
	c.count(0)
	return c.Store.ListTasks(ctx, f, p)
}

func (c *countingStore) CountRuns(ctx context.Context, f store.RunFilter) (int, error) {
	c.count(0)
	return c.Store.CountRuns(ctx, f)
}

func (c *countingStore) ListSchedules(ctx context.Context) ([]store.Schedule, error) {
	c.count(0)
	return c.Store.ListSchedules(ctx)
}

func (c *countingStore) ListScheduleRuns(ctx context.Context, f store.ScheduleRunFilter) ([]store.ScheduleRun, error) {
	runs, err := c.Store.ListScheduleRuns(ctx, f)
	n := 0
	for _, r := range runs {
		if len(r.Summary) > 0 {
			n++
		}
	}
	c.count(n)
	return runs, err
}

// TestScrapeCostDoesNotGrowWithNodes: a scrape makes as many store reads
// at 40 nodes as at 4, and the summary of a schedule's latest run (a
// large matrix's is megabytes) is read once, not at every scrape, until
// a later run succeeds; a failed run does not make it read again.
func TestScrapeCostDoesNotGrowWithNodes(t *testing.T) {
	perScrape := map[int]int{}
	for _, n := range []int{4, 40} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			sc, err := f.st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: []byte(`{}`), NextAt: f.now}, f.now)
			if err != nil {
				t.Fatal(err)
			}
			run := func(at time.Time, bps float64, state store.ScheduleRunState) {
				sum := &api.ScheduleSummary{}
				for i := 0; i < n; i++ {
					for j := 0; j < n; j++ {
						if i != j {
							sum.Rows = append(sum.Rows, pairRow(fmt.Sprintf("n%02d", i), fmt.Sprintf("n%02d", j), bps, 0.1, 0, ""))
						}
					}
				}
				sum.Pairs = len(sum.Rows)
				finishScheduleRun(t, f.st, sc, at, state, sum)
			}
			run(f.now, 8e9, store.ScheduleSucceeded)
			cs := &countingStore{Store: f.st}
			h := metrics.New(cs, metrics.Options{}).Handler()
			worst := map[string]string{"node": "n00", "direction": "out", "stat": "worst"}
			const scrapes = 3
			for i := 0; i < scrapes; i++ {
				q0, _ := cs.reads()
				fams := scrape(t, h)
				q1, _ := cs.reads()
				if got := gauge(t, fams, "cnperf_matrix_node_throughput_bytes_per_second", worst); got != 1e9 {
					t.Fatalf("scrape %d: n00's worst throughput out %v, want 1e9", i, got)
				}
				if i > 1 && q1-q0 != perScrape[n] {
					t.Errorf("scrape %d made %d store reads, the one before %d", i, q1-q0, perScrape[n])
				}
				perScrape[n] = q1 - q0 // the first's include reading the summary
			}
			if _, s := cs.reads(); s != 1 {
				t.Errorf("%d scrapes read the latest run's summary %d times, want once", scrapes, s)
			}
			run(f.now.Add(time.Hour), 4e9, store.ScheduleFailed)
			scrape(t, h)
			if _, s := cs.reads(); s != 1 {
				t.Errorf("after a failed run the summary was read %d times in all, want once (the figures stay the succeeded run's)", s)
			}
			run(f.now.Add(2*time.Hour), 4e9, store.ScheduleSucceeded)
			if got := gauge(t, scrape(t, h), "cnperf_matrix_node_throughput_bytes_per_second", worst); got != 5e8 {
				t.Errorf("after a new run: n00's worst throughput out %v, want the new run's 5e8", got)
			}
			scrape(t, h)
			if _, s := cs.reads(); s != 2 {
				t.Errorf("the summary was read %d times in all, want twice (once a succeeded run)", s)
			}
		})
	}
	if perScrape[4] != perScrape[40] {
		t.Errorf("a scrape makes %d store reads at 4 nodes and %d at 40; want as many", perScrape[4], perScrape[40])
	}
}
