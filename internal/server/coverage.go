package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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

// defaultCoverageOverdue is when a pair is overdue unless overdue=
// says (cnperf matrix coverage's default).
const defaultCoverageOverdue = 24 * time.Hour

// MatrixCoverage answers a page of st's coverage (q): the rows of whole
// senders, from the first node after q.After, of at most q.Limit pairs
// (at least one sender's). A row holds a pair for each node known (the
// agents', online or not, and those of the kept measurements) with its
// kept measurements, a pair never measured without them; ages count
// from now. The first page carries the
// tally of the whole matrix. The server answers it on GET
// /api/v2/matrix/coverage; `cnperf matrix coverage --db` reads it
// straight from a store. Its memory is a page's, whatever N.
func MatrixCoverage(ctx context.Context, st store.Store, now time.Time, q api.CoverageQuery) (api.MatrixCoverage, error) {
	if q.Limit < 0 || q.Limit > api.MaxCoverageLimit {
		return api.MatrixCoverage{}, &api.Error{Status: http.StatusBadRequest, Field: "limit", Message: fmt.Sprintf("%d: want 1 to %d pairs a page", q.Limit, api.MaxCoverageLimit)}
	}
	if q.Overdue < 0 {
		return api.MatrixCoverage{}, &api.Error{Status: http.StatusBadRequest, Field: "overdue", Message: fmt.Sprintf("%s: want a positive duration", q.Overdue)}
	}
	if q.Limit == 0 {
		q.Limit = api.DefaultCoverageLimit
	}
	if q.Overdue == 0 {
		q.Overdue = defaultCoverageOverdue
	}
	nodes, err := st.MatrixNodes(ctx)
	if err != nil {
		return api.MatrixCoverage{}, err
	}
	agents, err := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if err != nil {
		return api.MatrixCoverage{}, err
	}
	for _, a := range agents {
		if a.NodeName != "" {
			nodes = append(nodes, a.NodeName)
		}
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	out := api.MatrixCoverage{At: now, Nodes: nodes, Pairs: []api.PairCoverage{}}
	if q.After == "" {
		if out.Tally, err = tallyCoverage(ctx, st, now, len(nodes), q.Overdue); err != nil {
			return api.MatrixCoverage{}, err
		}
	}
	first, _ := slices.BinarySearch(nodes, q.After)
	if q.After != "" && first < len(nodes) && nodes[first] == q.After {
		first++
	}
	per := max(len(nodes)-1, 1)
	last := min(first+max(q.Limit/per, 1), first+store.MaxMatrixSenders, len(nodes))
	srcs := nodes[first:last]
	if len(srcs) == 0 {
		return out, nil
	}
	kept, err := st.ListMatrixPairs(ctx, srcs)
	if err != nil {
		return api.MatrixCoverage{}, err
	}
	// The kept pairs by sender and receiver (in maps, not the listing's
	// order: the database's collation need not be Go's).
	by := map[string]map[string]*api.PairCoverage{}
	for _, p := range kept {
		row := by[p.Src]
		if row == nil {
			row = map[string]*api.PairCoverage{}
			by[p.Src] = row
		}
		c := row[p.Dst]
		if c == nil {
			c = &api.PairCoverage{Src: p.Src, Dst: p.Dst}
			row[p.Dst] = c
		}
		addMeasure(c, p)
	}
	for _, src := range srcs {
		for _, dst := range nodes {
			if dst == src {
				continue
			}
			c := api.PairCoverage{Src: src, Dst: dst}
			if k := by[src][dst]; k != nil {
				c = *k
				slices.Sort(c.Measures)
			}
			if q.OnlyOverdue && !c.Overdue(now, q.Overdue) {
				continue
			}
			out.Pairs = append(out.Pairs, c)
		}
	}
	if last < len(nodes) {
		out.Next = nodes[last-1]
	}
	return out, nil
}

// addMeasure adds a kept measurement to its pair's coverage: the pair is
// as old as its oldest kind.
func addMeasure(c *api.PairCoverage, p store.MatrixPair) {
	at := p.MeasuredAt
	if c.MeasuredAt == nil || at.Before(*c.MeasuredAt) {
		c.MeasuredAt = &at
	}
	c.Measures = append(c.Measures, p.Measure)
	var fig map[string]float64
	if json.Unmarshal([]byte(p.Figures), &fig) == nil {
		if c.Figures == nil {
			c.Figures = map[string]float64{}
		}
		maps.Copy(c.Figures, fig)
	}
}

// tallyCoverage counts the whole matrix's pairs of n nodes: kept ones
// by the store (one row of answer), those never measured by difference.
func tallyCoverage(ctx context.Context, st store.Store, now time.Time, n int, overdue time.Duration) (*api.CoverageTally, error) {
	t, err := st.TallyMatrixPairs(ctx, now.Add(-overdue))
	if err != nil {
		return nil, err
	}
	all := n * (n - 1) // every kept pair's nodes are among the n
	out := &api.CoverageTally{Pairs: all, Measured: t.Pairs, Overdue: t.Before + all - t.Pairs, OverdueS: overdue.Seconds()}
	if t.Oldest != nil {
		age := max(now.Sub(*t.Oldest), 0).Seconds()
		out.OldestS = &age
	}
	return out, nil
}

// handleMatrixCoverage answers a page of the matrix's coverage: after=
// (the last sender of the previous page), limit= (pairs), overdue= (a
// duration, 24h) and only_overdue=1.
func (s *Server) handleMatrixCoverage(w http.ResponseWriter, r *http.Request) {
	q, err := coverageQuery(r.URL.Query())
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	cov, err := MatrixCoverage(r.Context(), s.st, s.now(), q)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	writeJSON(w, http.StatusOK, cov)
}

func coverageQuery(v url.Values) (api.CoverageQuery, error) {
	q := api.CoverageQuery{After: v.Get("after")}
	bad := func(field, msg string) error {
		return &api.Error{Status: http.StatusBadRequest, Field: field, Message: v.Get(field) + ": " + msg}
	}
	if len(q.After) > 253 {
		return q, &api.Error{Status: http.StatusBadRequest, Field: "after", Message: "longer than a node name (253 bytes)"}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > api.MaxCoverageLimit {
			return q, bad("limit", fmt.Sprintf("want 1 to %d pairs a page", api.MaxCoverageLimit))
		}
		q.Limit = n
	}
	if o := v.Get("overdue"); o != "" {
		d, err := time.ParseDuration(o)
		if err != nil || d <= 0 {
			return q, bad("overdue", "want a positive duration such as 24h or 90m")
		}
		q.Overdue = d
	}
	switch v.Get("only_overdue") {
	case "", "0", "false":
	case "1", "true":
		q.OnlyOverdue = true
	default:
		return q, bad("only_overdue", "want 1 or 0")
	}
	return q, nil
}
