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

// maxListedOverdue bounds the overdue pairs the coverage page lists;
// maxOverduePages the pages of the coverage it reads to find them.
const (
	maxListedOverdue = 100
	maxOverduePages  = 4
)

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
	// The first page: the tally of the whole matrix and, up to
	// maxHeatNodes nodes (fewer pairs than a page holds), every pair.
	q := api.CoverageQuery{Overdue: overdue, Limit: api.MaxCoverageLimit}
	cov, err := d.opts.API.MatrixCoverage(ctx, q)
	if err != nil {
		d.failAPI(w, r, "matrix coverage", err)
		return
	}
	p := coveragePage{page: d.basePage(r, "Matrix coverage"), Overdue: overdue, At: cov.At, Nodes: len(cov.Nodes)}
	if t := cov.Tally; t != nil {
		p.Pairs, p.Measured, p.Late = t.Pairs, t.Measured, t.Overdue
		if t.OldestS != nil {
			p.Oldest = time.Duration(*t.OldestS * float64(time.Second))
		}
	}
	p.TooMany = p.Nodes > maxHeatNodes || cov.Next != ""
	if !p.TooMany && p.Nodes > 1 {
		p.Chart = report.HeatMap("coverage", report.CoverageMatrix(cov, overdue))
	}
	// The overdue pairs listed: the first found, a page at a time, at
	// most maxOverduePages pages of the matrix read.
	q.OnlyOverdue = true
	for pages := 0; ; pages++ {
		for _, pc := range cov.Pairs {
			if len(p.Listed) < maxListedOverdue && pc.Overdue(cov.At, overdue) {
				p.Listed = append(p.Listed, pc)
			}
		}
		if cov.Next == "" || len(p.Listed) >= maxListedOverdue || pages+1 >= maxOverduePages {
			break
		}
		q.After = cov.Next
		if cov, err = d.opts.API.MatrixCoverage(ctx, q); err != nil {
			d.failAPI(w, r, "matrix coverage", err)
			return
		}
	}
	p.Refresh = 30
	d.render(w, r, http.StatusOK, "coverage", p)
}
