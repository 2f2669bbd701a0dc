package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"

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

// MatrixCoverage gathers st's kept matrix measurements by ordered pair,
// adding the pairs of known nodes (agents', online or not) never
// measured, in node order; ages count from now. The server answers it on
// GET /api/v2/matrix/coverage; `cnperf matrix coverage --db` reads it
// straight from a store.
func MatrixCoverage(ctx context.Context, st store.Store, now time.Time) (api.MatrixCoverage, error) {
	kept, err := st.ListMatrixPairs(ctx)
	if err != nil {
		return api.MatrixCoverage{}, err
	}
	agents, err := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if err != nil {
		return api.MatrixCoverage{}, err
	}
	var nodes []string
	for _, a := range agents {
		if a.NodeName != "" {
			nodes = append(nodes, a.NodeName)
		}
	}
	by := map[[2]string]*api.PairCoverage{}
	for _, p := range kept {
		k := [2]string{p.Src, p.Dst}
		c := by[k]
		if c == nil {
			at := p.MeasuredAt
			c = &api.PairCoverage{Src: p.Src, Dst: p.Dst, MeasuredAt: &at, Figures: map[string]float64{}}
			by[k] = c
		}
		if p.MeasuredAt.Before(*c.MeasuredAt) {
			at := p.MeasuredAt
			c.MeasuredAt = &at
		}
		c.Measures = append(c.Measures, p.Measure)
		var fig map[string]float64
		if json.Unmarshal([]byte(p.Figures), &fig) == nil {
			for name, v := range fig {
				c.Figures[name] = v
			}
		}
		nodes = append(nodes, p.Src, p.Dst)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	out := api.MatrixCoverage{At: now, Nodes: nodes, Pairs: make([]api.PairCoverage, 0, len(nodes)*max(len(nodes)-1, 0))}
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			if c := by[[2]string{a, b}]; c != nil {
				slices.Sort(c.Measures)
				out.Pairs = append(out.Pairs, *c)
			} else {
				out.Pairs = append(out.Pairs, api.PairCoverage{Src: a, Dst: b})
			}
		}
	}
	return out, nil
}

// handleMatrixCoverage answers the matrix's coverage.
func (s *Server) handleMatrixCoverage(w http.ResponseWriter, r *http.Request) {
	cov, err := MatrixCoverage(r.Context(), s.st, s.now())
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	writeJSON(w, http.StatusOK, cov)
}
