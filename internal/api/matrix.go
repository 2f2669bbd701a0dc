package api

import "time"

// MatrixCoverage is a page of the answer of GET /api/v2/matrix/coverage:
// the ordered pairs of the nodes known (the agents', online or not, and
// those of kept measurements) with their latest matrix measurement,
// whichever run and pair plan made it. A page holds whole senders' rows
// of the matrix, in node order; Next asks for the following page.
type MatrixCoverage struct {
	// At is the server's time of the answer; ages are counted from it.
	At    time.Time `json:"at"`
	Nodes []string  `json:"nodes"`
	// Pairs are in node order, sender first; a pair never measured has
	// no measured_at. With only_overdue, only the overdue ones.
	Pairs []PairCoverage `json:"pairs"`
	// Next is the after= of the next page; empty on the last.
	Next string `json:"next,omitempty"`
	// Tally counts every pair, on the first page only (no after=).
	Tally *CoverageTally `json:"tally,omitempty"`
}

// CoverageTally counts the ordered pairs of the whole matrix.
type CoverageTally struct {
	Pairs    int `json:"pairs"`    // ordered pairs of the nodes known
	Measured int `json:"measured"` // those with a kept measurement
	// Overdue are never measured or measured longer than overdue ago.
	Overdue  int      `json:"overdue"`
	OverdueS float64  `json:"overdue_s"`          // the overdue asked
	OldestS  *float64 `json:"oldest_s,omitempty"` // the oldest measured pair's age
}

// Coverage pages: a page holds whole senders' rows, at most
// MaxCoverageLimit pairs (DefaultCoverageLimit unless limit= says), but
// always one sender's row.
const (
	DefaultCoverageLimit = 5000
	MaxCoverageLimit     = 50000
)

// CoverageQuery asks for a page of the coverage (the query of GET
// /api/v2/matrix/coverage).
type CoverageQuery struct {
	// After is the last sender of the previous page (after=).
	After string
	// Limit bounds the page's pairs (limit=; 0: DefaultCoverageLimit).
	Limit int
	// Overdue is when a pair is overdue (overdue=; 0: 24h).
	Overdue time.Duration
	// OnlyOverdue keeps only the overdue pairs in the page
	// (only_overdue=1); the page still spans Limit pairs of the matrix.
	OnlyOverdue bool
}

// PairCoverage is one ordered node pair's coverage.
type PairCoverage struct {
	Src string `json:"src_node"`
	Dst string `json:"dst_node"`
	// MeasuredAt is the oldest of its kinds' latest measurements (nil:
	// never measured).
	MeasuredAt *time.Time `json:"measured_at,omitempty"`
	// Measures are the kinds measured (tcp, udp, rr, ping).
	Measures []string `json:"measures,omitempty"`
	// Figures are the last figures (throughput_bps.receiver, rtt_ms.p50,
	// udp.loss_pct, ...).
	Figures map[string]float64 `json:"figures,omitempty"`
}

// Age is how long before at p was measured, and false when never.
func (p PairCoverage) Age(at time.Time) (time.Duration, bool) {
	if p.MeasuredAt == nil {
		return 0, false
	}
	return max(at.Sub(*p.MeasuredAt), 0), true
}

// Overdue says whether p was never measured or measured longer than
// overdue before at.
func (p PairCoverage) Overdue(at time.Time, overdue time.Duration) bool {
	age, ok := p.Age(at)
	return !ok || age > overdue
}
