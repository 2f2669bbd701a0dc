package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// The matrix's coverage: each result of a matrix run's task is kept as
// its node pair's latest measurement of that kind (store.MatrixPair), so
// the age of every pair is known whichever plan and run measured it.

// coverageMemo bounds the runs and agents coverage remembers.
const coverageMemo = 20000

// coverage remembers which runs are the matrix's and which node each
// agent is on, so a result costs one write and no reads in the common
// case.
type coverage struct {
	mu    sync.Mutex
	runs  map[string]bool   // run id → is a matrix run
	nodes map[string]string // agent pod uid → node
}

func (c *coverage) isMatrix(ctx context.Context, st store.Store, runID string) (bool, error) {
	c.mu.Lock()
	v, ok := c.runs[runID]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	r, err := st.GetRun(ctx, runID)
	if err != nil {
		return false, err
	}
	v = r.Suite == matrix.SuiteName
	c.mu.Lock()
	if c.runs == nil || len(c.runs) >= coverageMemo {
		c.runs = map[string]bool{}
	}
	c.runs[runID] = v
	c.mu.Unlock()
	return v, nil
}

func (c *coverage) node(ctx context.Context, st store.Store, uid string) (string, error) {
	c.mu.Lock()
	n, ok := c.nodes[uid]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	a, err := st.GetAgent(ctx, uid)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.nodes == nil || len(c.nodes) >= coverageMemo {
		c.nodes = map[string]string{}
	}
	c.nodes[uid] = a.NodeName
	c.mu.Unlock()
	return a.NodeName, nil
}

// recordCoverage keeps t's result as its pair's coverage when t is a
// succeeded task of a matrix run; a failure is logged, never the
// report's.
func (s *Server) recordCoverage(ctx context.Context, t store.Task) {
	if t.RunID == "" || t.State != store.TaskSucceeded || len(t.Result) == 0 {
		return
	}
	if ok, err := s.cover.isMatrix(ctx, s.st, t.RunID); err != nil || !ok {
		if err != nil {
			s.log.Warn("matrix coverage: run", "run_id", t.RunID, "err", err)
		}
		return
	}
	src, err := s.cover.node(ctx, s.st, t.SrcPodUID)
	if err != nil {
		s.log.Warn("matrix coverage: source agent", "task_id", t.TaskID, "err", err)
		return
	}
	dst, err := s.cover.node(ctx, s.st, t.DstPodUID)
	if err != nil {
		s.log.Warn("matrix coverage: destination agent", "task_id", t.TaskID, "err", err)
		return
	}
	at := s.now()
	if t.FinishedAt != nil {
		at = *t.FinishedAt
	}
	if err := KeepMatrixResult(ctx, s.st, t.RunID, src, dst, at, t.Result); err != nil {
		s.log.Warn("matrix coverage: record", "task_id", t.TaskID, "err", err)
	}
}

// KeepMatrixResult keeps result (a probe.Result as JSON), measured at
// at by a task of matrix run runID from node src to node dst, as the
// pair's latest measurement of its kind: what the server does with each
// result of a matrix run (make bench-matrixsim calls it the same way).
// A result that is not a probe.Result is not kept, without an error.
func KeepMatrixResult(ctx context.Context, st store.Store, runID, src, dst string, at time.Time, result json.RawMessage) error {
	var r probe.Result
	if err := json.Unmarshal(result, &r); err != nil {
		return nil
	}
	fig, err := json.Marshal(matrix.PairFigures(r.Kind, &r))
	if err != nil {
		return fmt.Errorf("matrix pair figures: %w", err)
	}
	return st.RecordMatrixPair(ctx, store.MatrixPair{Src: src, Dst: dst, Measure: r.Kind, RunID: runID, MeasuredAt: at, Figures: string(fig)})
}
