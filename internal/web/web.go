// Package web is cnperf's dashboard: server-rendered pages (html/template,
// no JavaScript needed) showing agents by node, runs with their progress,
// a run's tables and charts, a comparison of runs with the figures that
// got worse beyond their run-to-run spread, a form to start a suite, and
// the schedules with their latest runs, and the matrix's coverage (each
// node pair's age, the overdue ones marked).
//
// Users log in with the API's user token and get a cookie session; a
// request with the token as a bearer header is let in as well. The
// dashboard reads and writes only through the server's v2 API (the API
// interface, satisfied by the API client), so it shows what the API
// answers and nothing else. Bad input (an unknown run, runs of different
// suites, malformed query parameters) gets a page saying what is wrong
// with a 4xx status, never a 500.
package web

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// API is the part of the server's v2 API the dashboard uses;
// *client.Client implements it.
type API interface {
	Agents(ctx context.Context, all bool) ([]api.Agent, error)
	ListRuns(ctx context.Context, limit int, after string) (api.RunPage, error)
	GetRun(ctx context.Context, id string) (api.Run, error)
	CreateRun(ctx context.Context, rc api.RunCreate) (api.Run, error)
	CancelRun(ctx context.Context, id, reason string) (api.Run, error)
	ListSchedules(ctx context.Context) ([]api.Schedule, error)
	MatrixCoverage(ctx context.Context, q api.CoverageQuery) (api.MatrixCoverage, error)
}

// Options configure a Dashboard. API and UserToken are required.
type Options struct {
	API       API
	UserToken string
	// Suites are the suites the start form offers (nil: none). Suites
	// that need a lab's network fail to plan here and say so.
	Suites *suite.Registry
	Logger *slog.Logger
	Now    func() time.Time
	// SessionTTL is how long a login lasts (default 12 h).
	SessionTTL time.Duration
	// RunTimeout bounds a suite started from the form (default 2 h).
	RunTimeout time.Duration
	// TokenPlaces say on the login page where the user token is kept on
	// the installs this server may be part of (nil: the page says only
	// that it is the server's user token).
	TokenPlaces []TokenPlace
}

// TokenPlace says where one kind of install keeps the user token.
type TokenPlace struct {
	Install string // "Kubernetes", "a lab"
	Where   string // "Secret cnperf-tokens (key user-token) in namespace cnperf"
	Command string // a command that prints the token; "" when none
}

// Dashboard serves the pages. Register mounts them on a mux; Close stops
// the suites it started.
type Dashboard struct {
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	pages map[string]*template.Template
	sess  *sessions
	login *loginLimiter

	ctx    context.Context // cancelled by Close: ends suites started here
	cancel context.CancelFunc
	wg     sync.WaitGroup // suites running in the background
}

//go:embed templates/*.tmpl
var templateFS embed.FS

// New checks opts and parses the templates.
func New(opts Options) (*Dashboard, error) {
	if opts.API == nil {
		return nil, errors.New("web: no API")
	}
	if opts.UserToken == "" {
		return nil, errors.New("web: no user token")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	if opts.RunTimeout <= 0 {
		opts.RunTimeout = 2 * time.Hour
	}
	d := &Dashboard{opts: opts, log: opts.Logger, now: opts.Now, pages: map[string]*template.Template{},
		sess: newSessions(opts.SessionTTL, opts.Now), login: newLoginLimiter(opts.Now)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, page := range []string{"login", "error", "home", "run", "compare", "schedules", "coverage"} {
		base, err := report.Templates()
		if err != nil {
			return nil, err
		}
		t, err := base.Funcs(funcs(opts.Now)).ParseFS(templateFS, "templates/layout.html.tmpl", "templates/"+page+".html.tmpl")
		if err != nil {
			return nil, fmt.Errorf("web: parse %s page: %w", page, err)
		}
		d.pages[page] = t
	}
	return d, nil
}

// Close cancels the suites started from the dashboard and waits for them
// to end (their runs are cancelled on the server).
func (d *Dashboard) Close() {
	d.cancel()
	d.wg.Wait()
}

func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			d := now().Sub(t).Round(time.Second)
			switch {
			case d < 0:
				return "just now"
			case d < time.Minute:
				return fmt.Sprintf("%d s ago", int(d.Seconds()))
			case d < time.Hour:
				return fmt.Sprintf("%d min ago", int(d.Minutes()))
			case d < 48*time.Hour:
				return fmt.Sprintf("%.1f h ago", d.Hours())
			}
			return t.UTC().Format("2006-01-02 15:04")
		},
		"short": func(id string) string {
			if len(id) > 13 {
				return id[:8] + "…"
			}
			return id
		},
		"shortID":   shortID,
		"took":      func(a, b time.Time) string { return b.Sub(a).Round(100 * time.Millisecond).String() },
		"inc":       func(i int) int { return i + 1 },
		"isVerdict": func(j int) bool { return j >= 3 && (j-3)%3 == 2 },
	}
}

// Register mounts the dashboard's pages on mux. Every pattern is specific
// (no catch-all), so the API's own patterns stay in charge of the rest.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", d.authed(d.handleHome))
	mux.HandleFunc("GET /login", d.handleLoginPage)
	mux.HandleFunc("POST /login", d.handleLogin)
	mux.HandleFunc("POST /logout", d.authed(d.handleLogout))
	mux.HandleFunc("GET /runs/{id}", d.authed(d.handleRun))
	mux.HandleFunc("GET /runs/{id}/report", d.authed(d.handleRunReport))
	mux.HandleFunc("GET /compare", d.authed(d.handleCompare))
	mux.HandleFunc("POST /start", d.authed(d.handleStart))
	mux.HandleFunc("GET /schedules", d.authed(d.handleSchedules))
	mux.HandleFunc("GET /matrix", d.authed(d.handleCoverage))
}

// Handler returns the dashboard alone on its own mux, with an HTML 404 for
// other paths (for tests and for serving it apart from the API).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	d.Register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	return mux
}

// page is what every template gets besides its own data.
type page struct {
	Title     string
	LoggedIn  bool
	CSRF      string
	Refresh   int
	Flash     string
	FlashKind string
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var b strings.Builder
	if err := d.pages[name].ExecuteTemplate(&b, "layout", data); err != nil {
		d.log.Error("render page", "page", name, "err", err)
		http.Error(w, "cnperf: could not render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

type errorPage struct {
	page
	Status     int
	StatusText string
	Message    string
}

// fail shows an error page with the status.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := errorPage{page: d.basePage(r, http.StatusText(status)), Status: status, StatusText: http.StatusText(status), Message: msg}
	d.render(w, r, status, "error", p)
}

// failAPI maps an API error to a page: the API's own 4xx status and
// message; anything else is a 502 (the dashboard could not get an answer).
func (d *Dashboard) failAPI(w http.ResponseWriter, r *http.Request, what string, err error) {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		d.fail(w, r, ae.Status, what+": "+ae.Message)
		return
	}
	d.log.Warn("dashboard: API call failed", "what", what, "err", err)
	d.fail(w, r, http.StatusBadGateway, what+": "+err.Error())
}

func (d *Dashboard) basePage(r *http.Request, title string) page {
	p := page{Title: title}
	if s, ok := d.session(r); ok {
		p.LoggedIn, p.CSRF = true, s.csrf
	} else if d.bearerOK(r) {
		p.LoggedIn = true
	}
	return p
}

func (d *Dashboard) bearerOK(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const pfx = "Bearer "
	if len(h) <= len(pfx) || !strings.EqualFold(h[:len(pfx)], pfx) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(h[len(pfx):]), []byte(d.opts.UserToken)) == 1
}
