package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// chromium finds Debian's chromium (or another Chrome) or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (apt-get install -y chromium; make test installs it)")
	return ""
}

// browser starts headless Chromium for one test and returns its tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelT := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelT(); cancelA() })
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1`)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// within runs actions with a deadline, failing the test with what was
// being done.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// screenshot saves a full-page PNG to $CNPERF_SCREENSHOT_DIR (or the
// test's temporary directory) and checks it is a real, non-trivial image.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 10000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, not a plausible PNG", name, len(png))
	}
	dir := os.Getenv("CNPERF_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startBaseline fills the overview's start form and returns the run id
// the browser lands on.
func startBaseline(t *testing.T, ctx context.Context, base, time_, repeat, backend string) string {
	t.Helper()
	within(t, ctx, 20*time.Second, "open the overview",
		chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#start-form")),
		chromedp.SetValue(chromedp.CSS("#suite"), "baseline"),
		chromedp.SetValue(chromedp.CSS("#time"), time_),
		chromedp.SetValue(chromedp.CSS("#repeat"), repeat),
		chromedp.SetValue(chromedp.CSS("#backend"), backend),
		chromedp.Click(chromedp.CSS("#start-suite")),
		chromedp.WaitVisible(chromedp.CSS("h1")))
	loc := eval[string](t, ctx, `location.pathname`)
	if !strings.HasPrefix(loc, "/runs/") {
		t.Fatalf("after starting the baseline the browser is at %s: %s", loc, eval[string](t, ctx, `document.body.innerText.slice(0, 400)`))
	}
	return strings.TrimPrefix(loc, "/runs/")
}

// watch waits in the browser until the run page (which reloads itself
// while the run is in progress) shows the run finished.
func watch(t *testing.T, ctx context.Context, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	sawProgress := false
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		status, err := chromedp.Run(c, chromedp.Evaluate[string](`(document.querySelector('.meta .status')||{}).textContent||''`))
		cancel()
		if err == nil {
			switch status {
			case "succeeded", "failed", "cancelled":
				if !sawProgress {
					t.Log("the run ended before the browser saw it in progress")
				}
				return status
			case "running":
				sawProgress = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run page still shows %q after %v", status, within)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the browser test runs two baselines")
	}
	ctx := browser(t)
	// On the lab when root (as CI runs), else agents on loopback.
	var cl *cluster
	backend := "loopback"
	if lab.CheckPrivileges() == nil && os.Getenv("CNPERF_BROWSER_LOOPBACK") == "" {
		cl, backend = newLabCluster(t), lab.BackendHostGW
	} else {
		cl = newCluster(t, 2, 2)
	}
	t.Logf("dashboard of the cnperf server on %s", cl.Where)
	// Screenshots for the docs use longer measurements (CNPERF_SCREENSHOT_DIR).
	tm, rep := "300ms", "1"
	if os.Getenv("CNPERF_SCREENSHOT_DIR") != "" {
		tm, rep = "2s", "2"
	}

	// Log in: the overview sends the browser to the login page first.
	within(t, ctx, 20*time.Second, "log in",
		chromedp.Navigate(cl.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), cl.Token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#agent-summary")))
	if s := eval[string](t, ctx, `document.querySelector('#agent-summary').innerText`); s != "6 online of 6 agents on 2 nodes" {
		t.Errorf("agent summary %q", s)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('tr.agent[data-status=free]').length`); n != 6 {
		t.Errorf("%d agents shown free, want 6", n)
	}
	screenshot(t, ctx, "overview.png")

	// Start a baseline, watch it finish, and check its page against the API.
	id1 := startBaseline(t, ctx, cl.URL, tm, rep, backend)
	if status := watch(t, ctx, 3*time.Minute); status != "succeeded" {
		t.Fatalf("run %s ended %s", id1, status)
	}
	run, err := cl.API.GetRun(context.Background(), id1)
	if err != nil {
		t.Fatal(err)
	}
	if run.State != api.RunSucceeded {
		t.Fatalf("API says run %s is %s", id1, run.State)
	}
	_, outs, err := suite.OutcomesFromRun(run)
	if err != nil {
		t.Fatal(err)
	}
	text := eval[string](t, ctx, `document.body.innerText`)
	checked := 0
	for _, row := range suite.Rows(outs) {
		for _, m := range report.KeyMetrics() {
			v, ok := row.Median[m]
			if !ok {
				continue
			}
			want := report.FormatRange(v, row.Min[m], row.Max[m], report.Info(m).Unit)
			if !strings.Contains(text, want) {
				t.Errorf("%s %s: the page does not show the API's %q", row.Connection, m, want)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("only %d figures checked against the API", checked)
	}
	for _, chart := range []string{"bars-throughput", "bars-rtt", "throughput-time", "cdf-rtt"} {
		js := fmt.Sprintf(`(function(){var s=document.getElementById(%q);if(!s)return 0;var r=s.getBoundingClientRect();return r.width>300&&r.height>150?s.querySelectorAll('.bar,.series,.marker').length:-1})()`, chart)
		if n := eval[int](t, ctx, js); n <= 0 {
			t.Errorf("chart %s: %d marks drawn (0: missing, -1: not visible)", chart, n)
		}
	}
	p := screenshot(t, ctx, "run.png")
	t.Logf("run page: %s", p)

	// A second baseline, then compare the two in the browser.
	id2 := startBaseline(t, ctx, cl.URL, tm, rep, backend)
	if status := watch(t, ctx, 3*time.Minute); status != "succeeded" {
		t.Fatalf("run %s ended %s", id2, status)
	}
	within(t, ctx, 20*time.Second, "tick two runs and compare",
		chromedp.Navigate(cl.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#compare-form")),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[value=%q]`, id1))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`input[value=%q]`, id2))),
		chromedp.Click(chromedp.CSS("#compare")),
		chromedp.WaitVisible(chromedp.CSS("#compare-summary")))
	if n := eval[int](t, ctx, `document.querySelectorAll('#compare-table tbody tr').length`); n < 30 {
		t.Errorf("comparison table has %d lines, want one per metric of 3 connections", n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#compare-key tbody tr').length`); n < 3*8 {
		t.Errorf("key comparison table has %d lines, want the key figures of 3 connections", n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#cmp-throughput .bar').length`); n != 6 {
		t.Errorf("comparison chart has %d bars, want 6 (2 runs × 3 connections)", n)
	}
	hdr := eval[string](t, ctx, `document.querySelector('#compare-key thead').innerText`)
	if !strings.Contains(hdr, id1[:8]) || !strings.Contains(hdr, id2[:8]) {
		t.Errorf("comparison header %q lacks the run ids", hdr)
	}
	p = screenshot(t, ctx, "compare.png")
	t.Logf("comparison page: %s", p)
}
