package web

import (
	"context"
	"net/http"

	"github.com/cnperf/cnperf/internal/api"
)

type schedulesPage struct {
	page
	Schedules []api.Schedule
}

// handleSchedules lists the schedules with their latest runs (each with
// links to its runs, its pairs, outliers and SLO verdict), refreshed
// every 10 s.
func (d *Dashboard) handleSchedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	scs, err := d.opts.API.ListSchedules(ctx)
	if err != nil {
		d.failAPI(w, r, "list schedules", err)
		return
	}
	p := schedulesPage{page: d.basePage(r, "Schedules"), Schedules: scs}
	p.Refresh = 10
	d.render(w, r, http.StatusOK, "schedules", p)
}
