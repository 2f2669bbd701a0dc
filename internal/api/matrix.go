package api

import "time"

// MatrixCoverage is the answer of GET /api/v2/matrix/coverage: every
// ordered pair of the nodes known (the agents', online or not, and those
// of kept measurements) with its latest matrix measurement, whichever run
// and pair plan made it.
type MatrixCoverage struct {
	// At is the server's time of the answer; ages are counted from it.
	At    time.Time `json:"at"`
	Nodes []string  `json:"nodes"`
	// Pairs are in node order, sender first; a pair never measured has
	// no measured_at.
	Pairs []PairCoverage `json:"pairs"`
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
