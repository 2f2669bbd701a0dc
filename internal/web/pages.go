package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/report"
)

// apiTimeout bounds the API calls behind one page.
const apiTimeout = 20 * time.Second

// runsPerPage is the length of the overview's run list.
const runsPerPage = 25

type nodeView struct {
	Name   string
	Online int
	Agents []api.Agent
}

type runRow struct {
	ID, Suite, Phase, State string
	Done, Total             int
	Percent                 float64
	CreatedAt               time.Time
}

type suiteInfo struct{ Name, Describe string }

type homePage struct {
	page
	Nodes              []nodeView
	Online, AgentTotal int
	Runs               []runRow
	PrevPage, NextPage int
	Suites             []suiteInfo
}

func (d *Dashboard) handleHome(w http.ResponseWriter, r *http.Request) {
	pageNo := 1
	if v := r.URL.Query().Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("page %q: want a whole number from 1", v))
			return
		}
		pageNo = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	agents, err := d.opts.API.Agents(ctx, true)
	if err != nil {
		d.failAPI(w, r, "list agents", err)
		return
	}
	runs, err := allRuns(ctx, d.opts.API)
	if err != nil {
		d.failAPI(w, r, "list runs", err)
		return
	}
	p := homePage{page: d.basePage(r, "Overview"), AgentTotal: len(agents)}
	if f := r.URL.Query().Get("started"); f != "" {
		p.Flash = "Started suite " + f + "."
	}
	byNode := map[string]*nodeView{}
	for _, a := range agents {
		n, ok := byNode[a.NodeName]
		if !ok {
			n = &nodeView{Name: a.NodeName}
			byNode[a.NodeName] = n
		}
		n.Agents = append(n.Agents, a)
		if a.Status != "offline" {
			n.Online++
			p.Online++
		}
	}
	for _, n := range byNode {
		sort.Slice(n.Agents, func(i, j int) bool {
			if n.Agents[i].HostNetwork != n.Agents[j].HostNetwork {
				return n.Agents[i].HostNetwork
			}
			return n.Agents[i].PodName < n.Agents[j].PodName
		})
		p.Nodes = append(p.Nodes, *n)
	}
	sort.Slice(p.Nodes, func(i, j int) bool { return p.Nodes[i].Name < p.Nodes[j].Name })

	// Newest first.
	from := len(runs) - (pageNo-1)*runsPerPage
	if from <= 0 && pageNo > 1 {
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("page %d: there are only %d runs", pageNo, len(runs)))
		return
	}
	for i := from - 1; i >= 0 && i >= from-runsPerPage; i-- {
		p.Runs = append(p.Runs, rowOf(runs[i]))
	}
	if pageNo > 1 {
		p.PrevPage = pageNo - 1
	}
	if from-runsPerPage > 0 {
		p.NextPage = pageNo + 1
	}
	if d.opts.Suites != nil {
		for _, name := range d.opts.Suites.Names() {
			s, _ := d.opts.Suites.Get(name)
			p.Suites = append(p.Suites, suiteInfo{Name: name, Describe: s.Describe()})
		}
	}
	d.render(w, r, http.StatusOK, "home", p)
}

func rowOf(run api.Run) runRow {
	pr := progressOf(run)
	row := runRow{ID: run.ID, Suite: run.Suite, State: run.State, Done: pr.Done, Total: pr.Total, Percent: pr.Percent(), CreatedAt: run.CreatedAt}
	if p, ok := runParams(run); ok {
		row.Suite = p.Suite
		if p.Phases > 1 {
			row.Phase = fmt.Sprintf("%d/%d %s", p.PhaseIndex+1, p.Phases, p.Phase)
		}
	}
	return row
}

// validRunID rejects ids that cannot be run ids before asking the API.
func validRunID(id string) error {
	if id == "" {
		return errors.New("empty run id")
	}
	if len(id) > 100 {
		return fmt.Errorf("run id of %d characters: too long", len(id))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("run id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

func (d *Dashboard) getRun(w http.ResponseWriter, r *http.Request, ctx context.Context, id string) (api.Run, bool) {
	if err := validRunID(id); err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return api.Run{}, false
	}
	run, err := d.opts.API.GetRun(ctx, id)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			d.fail(w, r, http.StatusNotFound, fmt.Sprintf("no run %q: it may have been mistyped; the overview lists the runs", id))
			return api.Run{}, false
		}
		d.failAPI(w, r, "get run "+id, err)
		return api.Run{}, false
	}
	return run, true
}

type sibling struct{ ID, Phase string }

type runPage struct {
	page
	View      report.View
	HasIperf3 bool
	Siblings  []sibling
}

func (d *Dashboard) handleRun(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	run, ok := d.getRun(w, r, ctx, r.PathValue("id"))
	if !ok {
		return
	}
	rep := reportOf(run, d.opts.Suites)
	p := runPage{page: d.basePage(r, "Run "+run.ID), View: report.NewView(rep)}
	if !rep.Finished() {
		p.Refresh = 3
	}
	for _, o := range rep.Outcomes {
		if o.Result != nil && (o.Result.Kind == "tcp" || o.Result.Kind == "udp") {
			p.HasIperf3 = true
			break
		}
	}
	if params, ok := runParams(run); ok && params.Phases > 1 && params.Invocation != "" {
		if runs, err := allRuns(ctx, d.opts.API); err == nil {
			for _, o := range runs {
				if op, ok := runParams(o); ok && op.Invocation == params.Invocation && o.ID != run.ID {
					p.Siblings = append(p.Siblings, sibling{ID: o.ID, Phase: op.Phase})
				}
			}
		}
	}
	d.render(w, r, http.StatusOK, "run", p)
}

// reportFormats are the downloads of a run's report.
var reportFormats = map[string]struct {
	ctype, ext string
	write      func(*report.Report, *bytes.Buffer) error
}{
	"html":   {"text/html; charset=utf-8", "html", func(r *report.Report, b *bytes.Buffer) error { return r.WriteHTML(b) }},
	"md":     {"text/markdown; charset=utf-8", "md", func(r *report.Report, b *bytes.Buffer) error { return r.WriteMarkdown(b) }},
	"csv":    {"text/csv; charset=utf-8", "csv", func(r *report.Report, b *bytes.Buffer) error { return r.WriteCSV(b) }},
	"json":   {"application/json", "json", func(r *report.Report, b *bytes.Buffer) error { return r.WriteJSON(b) }},
	"iperf3": {"application/json", "iperf3.json", func(r *report.Report, b *bytes.Buffer) error { return r.WriteIperf3(b) }},
	"text":   {"text/plain; charset=utf-8", "txt", func(r *report.Report, b *bytes.Buffer) error { return r.WriteText(b) }},
}

func (d *Dashboard) handleRunReport(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "html"
	}
	f, ok := reportFormats[format]
	if !ok {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("format %q: want html, md, csv, json, iperf3 or text", format))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	run, ok := d.getRun(w, r, ctx, r.PathValue("id"))
	if !ok {
		return
	}
	var b bytes.Buffer
	if err := f.write(reportOf(run, d.opts.Suites), &b); err != nil {
		d.fail(w, r, http.StatusUnprocessableEntity, err.Error())
		return
	}
	w.Header().Set("Content-Type", f.ctype)
	if format != "html" {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "cnperf-"+run.ID+"."+f.ext))
	}
	_, _ = w.Write(b.Bytes())
}

type comparePage struct {
	page
	C            *report.Comparison
	Key, Table   report.Table
	Charts       []*report.Chart
	TolerancePct float64
	Notes        []string
}

// maxCompared bounds the runs of one comparison.
const maxCompared = 6

func (d *Dashboard) handleCompare(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ids := q["run"]
	if len(ids) == 1 && strings.Contains(ids[0], ",") {
		ids = strings.Split(ids[0], ",")
	}
	if len(ids) < 2 || len(ids) > maxCompared {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("compare needs 2 to %d runs (?run=A&run=B), got %d: tick at least two runs in the overview", maxCompared, len(ids)))
		return
	}
	tol := 0.0
	if v := q.Get("tolerance"); v != "" {
		t, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || t <= 0 || t >= 100 {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("tolerance %q: want a percentage between 0 and 100, e.g. 5", v))
			return
		}
		tol = t / 100
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	var reps []*report.Report
	var notes []string
	for _, id := range ids {
		run, ok := d.getRun(w, r, ctx, strings.TrimSpace(id))
		if !ok {
			return
		}
		rep := reportOf(run, d.opts.Suites)
		if !rep.Finished() {
			notes = append(notes, fmt.Sprintf("run %s is still in progress (%d/%d): its figures are partial", run.ID, rep.Progress.Done, rep.Progress.Total))
		}
		reps = append(reps, rep)
	}
	// The oldest run is the reference: "today vs last week" reads as
	// last week's figures changed into today's.
	sort.SliceStable(reps, func(i, j int) bool { return reps[i].CreatedAt.Before(reps[j].CreatedAt) })
	c, err := report.Compare(reps, report.CompareOptions{Tolerance: tol})
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	for i, id := range c.RunIDs {
		c.Runs[i] = strings.Replace(c.Runs[i], id, shortID(id), 1)
	}
	p := comparePage{page: d.basePage(r, "Compare runs"), C: c, Key: c.KeyTable(), Table: c.Table(), Charts: c.Charts(), TolerancePct: 100 * c.Tolerance, Notes: notes}
	d.render(w, r, http.StatusOK, "compare", p)
}

// shortID shortens a UUID to its first 8 characters for headings.
func shortID(id string) string {
	if len(id) > 13 {
		return id[:8]
	}
	return id
}
