package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
)

// startWait bounds how long the start form waits for the suite's first run
// to appear before sending the user to the overview.
const startWait = 15 * time.Second

func (d *Dashboard) handleStart(w http.ResponseWriter, r *http.Request) {
	if d.opts.Suites == nil {
		d.fail(w, r, http.StatusNotFound, "this server starts no suites")
		return
	}
	name := r.PostFormValue("suite")
	s, err := d.opts.Suites.Get(name)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("suite %q: %v", name, err))
		return
	}
	o := suite.DefaultOptions()
	if v := strings.TrimSpace(r.PostFormValue("time")); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("time %q: want a duration like 5s or 500ms", v))
			return
		}
		o.Time = t
	}
	if v := strings.TrimSpace(r.PostFormValue("repeat")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("repetitions %q: want a whole number", v))
			return
		}
		o.Repeat = n
	}
	o.Backend = strings.TrimSpace(r.PostFormValue("backend"))
	if len(o.Backend) > 40 {
		d.fail(w, r, http.StatusBadRequest, "backend label: at most 40 characters")
		return
	}
	if err := o.Validate(); err != nil {
		d.fail(w, r, http.StatusBadRequest, "suite options: "+err.Error())
		return
	}
	// Plan once here, so a suite that cannot run (too few agents, needs
	// changes no environment here can make) is refused on the spot with
	// its reason.
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	if _, err := d.opts.API.Agents(ctx, false); err != nil {
		d.failAPI(w, r, "list agents", err)
		return
	}
	if _, _, err := (&suite.Runner{API: d.opts.API}).Plan(ctx, s, o); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, suite.ErrEnvLacks) {
			status = http.StatusConflict
		}
		d.fail(w, r, status, fmt.Sprintf("suite %s cannot start: %v", name, err))
		return
	}
	inv := randomHex(8)
	runner := &suite.Runner{API: d.opts.API, Log: d.log, Invocation: inv}
	errc := make(chan error, 1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		rctx, cancel := context.WithTimeout(d.ctx, d.opts.RunTimeout)
		defer cancel()
		_, err := runner.Run(rctx, s, o)
		if err != nil {
			d.log.Warn("suite started from the dashboard failed", "suite", name, "err", err)
		}
		errc <- err
	}()
	// Wait for the suite's first run to exist, then show it.
	deadline := time.NewTimer(startWait)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if id := d.findInvocation(r.Context(), inv); id != "" {
			http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
			return
		}
		select {
		case err := <-errc:
			if id := d.findInvocation(r.Context(), inv); id != "" {
				http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
				return
			}
			if err == nil {
				err = errors.New("it created no run")
			}
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("suite %s did not start: %v", name, err))
			return
		case <-deadline.C:
			http.Redirect(w, r, "/?started="+url.QueryEscape(name)+"#runs", http.StatusSeeOther)
			return
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// findInvocation returns the id of the first run of a suite invocation, or "".
func (d *Dashboard) findInvocation(ctx context.Context, inv string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	runs, err := allRuns(ctx, d.opts.API)
	if err != nil {
		return ""
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if p, ok := runParams(runs[i]); ok && p.Invocation == inv && p.PhaseIndex == 0 {
			return runs[i].ID
		}
	}
	return ""
}
