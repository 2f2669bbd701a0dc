package web

import (
	"context"
	"net/http"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/report"
)

// defaultOverdue is when a pair's latest measurement is overdue unless
// the page's ?overdue= says otherwise (cnperf matrix coverage's default).
const defaultOverdue = 24 * time.Hour

// maxHeatNodes bounds the nodes the page draws a heat map of (N² cells
// of a few hundred bytes each); beyond it the page gives the counts and
// the overdue pairs.
const maxHeatNodes = 120

// maxListedOverdue bounds the overdue pairs the coverage page lists.
const maxListedOverdue = 100

type coveragePage struct {
	page
	Chart *report.Chart
	// TooMany says the heat map is left out (more than maxHeatNodes).
	TooMany bool
	Nodes   int
	Overdue time.Duration
	// Pairs, Measured and Late count the ordered pairs; Oldest is the
	// oldest measured pair's age.
	Pairs, Measured, Late int
	Oldest                time.Duration
	// Listed are the first overdue pairs (at most maxListedOverdue).
	Listed []api.PairCoverage
	At     time.Time
}

// handleCoverage draws the matrix's coverage: each ordered pair's age as
// a heat map, the overdue pairs (never measured or older than ?overdue=,
// default 24h) outlined and listed.
func (d *Dashboard) handleCoverage(w http.ResponseWriter, r *http.Request) {
	overdue := defaultOverdue
	if v := r.URL.Query().Get("overdue"); v != "" {
		o, err := time.ParseDuration(v)
		if err != nil || o <= 0 {
			d.fail(w, r, http.StatusBadRequest, "overdue="+v+": want a positive duration such as 24h or 90m")
			return
		}
		overdue = o
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	cov, err := d.opts.API.MatrixCoverage(ctx)
	if err != nil {
		d.failAPI(w, r, "matrix coverage", err)
		return
	}
	p := coveragePage{page: d.basePage(r, "Matrix coverage"), Overdue: overdue, Pairs: len(cov.Pairs), At: cov.At}
	for _, pc := range cov.Pairs {
		if age, ok := pc.Age(cov.At); ok {
			p.Measured++
			p.Oldest = max(p.Oldest, age)
		}
		if pc.Overdue(cov.At, overdue) {
			p.Late++
			if len(p.Listed) < maxListedOverdue {
				p.Listed = append(p.Listed, pc)
			}
		}
	}
	p.Nodes = len(cov.Nodes)
	p.TooMany = p.Nodes > maxHeatNodes
	if p.Nodes > 1 && !p.TooMany {
		p.Chart = report.HeatMap("coverage", report.CoverageMatrix(cov, overdue))
	}
	p.Refresh = 30
	d.render(w, r, http.StatusOK, "coverage", p)
}
