package web_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// kindsRun makes a v2 task run with one tcp, udp, rr and ping task
// between the loopback agents and waits for it; a ping the machine does
// not allow skips the test.
func kindsRun(t *testing.T, cl *cluster) api.Run {
	t.Helper()
	ms := func(d int) probe.Duration { return probe.Duration(time.Duration(d) * time.Millisecond) }
	rate := uint64(20e6)
	run, err := cl.API.CreateRun(context.Background(), api.RunCreate{Tasks: []api.RunTask{
		{Src: "uid-n1-p0", Dst: "uid-n2-p0", Spec: &probe.Spec{Kind: probe.KindTCP, Duration: ms(300), Interval: ms(100)}},
		{Src: "uid-n1-p0", Dst: "uid-n2-p0", Spec: &probe.Spec{Kind: probe.KindUDP, Duration: ms(300), RateBps: &rate}},
		{Src: "uid-n2-p0", Dst: "uid-n1-p0", Spec: &probe.Spec{Kind: probe.KindRR, Count: 200}},
		{Src: "uid-n2-p0", Dst: "uid-n1-p0", Spec: &probe.Spec{Kind: probe.KindPing, Count: 3, Interval: ms(100)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	run = cl.waitRun(t, run.ID, 60*time.Second)
	for _, tk := range run.Tasks {
		if tk.State == api.StateSucceeded {
			continue
		}
		if tk.Type == probe.KindPing && strings.Contains(tk.Reason, "permitted") {
			t.Skipf("this machine allows no ping from the test process: %s", tk.Reason)
		}
		t.Fatalf("task %d (%s) %s: %s", tk.ID, tk.Type, tk.State, tk.Reason)
	}
	return run
}

var svgRe = regexp.MustCompile(`(?s)<svg[^>]* id="([a-z0-9-]+)".*?</svg>`)

// TestTaskRunChartsByKind: the page of a v2 task run with tcp, udp, rr and
// ping results draws each result in the charts of its kind only (a udp
// result used to be drawn in the TCP chart, rr and ping as "UDP loss")
// and its table labels the figures by kind, never by raw probe keys.
func TestTaskRunChartsByKind(t *testing.T) {
	cl := newCluster(t, 2, 1)
	run := kindsRun(t, cl)
	hc := browserlessClient(t)
	login(t, hc, cl.URL)
	code, page := get(t, hc, cl.URL+"/runs/"+run.ID)
	if code != 200 {
		t.Fatalf("run page: %d", code)
	}
	charts := map[string]string{}
	for _, m := range svgRe.FindAllStringSubmatch(page, -1) {
		charts[m[1]] = m[0]
	}
	for id, kind := range map[string]string{"bars-throughput": "tcp", "throughput-time": "tcp", "bars-udp": "udp", "hist-owd": "udp",
		"bars-rtt": "rr", "cdf-rtt": "rr", "bars-ping": "ping", "cdf-ping": "ping"} {
		svg, ok := charts[id]
		if !ok {
			t.Errorf("no chart %s for the %s result", id, kind)
			continue
		}
		for _, k := range []string{"tcp", "udp", "rr", "ping"} {
			if has := strings.Contains(svg, "("+k+")"); has != (k == kind) {
				t.Errorf("chart %s (for %s) shows the %s result: %v", id, kind, k, has)
			}
		}
	}
	for _, want := range []string{"UDP throughput, receiver", "UDP loss", "RR round trip p50", "RR transactions/s", "Ping RTT avg", "Ping loss",
		"TCP throughput, receiver"} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %q", want)
		}
	}
	for _, bad := range []string{"latency ms", "rtt ms", "throughput bps", "loss pct"} {
		if strings.Contains(page, bad) {
			t.Errorf("run page shows the raw key %q", bad)
		}
	}
}

// TestTaskRunPageInBrowser shows a v2 task run's page in Chromium and
// saves a screenshot (CNPERF_SCREENSHOT_DIR, else the test's directory):
// each kind's chart is drawn and visible.
func TestTaskRunPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: starts Chromium")
	}
	ctx := browser(t)
	cl := newCluster(t, 2, 1)
	run := kindsRun(t, cl)
	within(t, ctx, 20*time.Second, "log in and open the run",
		chromedp.Navigate(cl.URL+"/runs/"+run.ID),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), cl.Token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#bars-udp")))
	for _, chart := range []string{"bars-throughput", "bars-udp", "bars-rtt", "bars-ping"} {
		js := `(function(){var s=document.getElementById("` + chart + `");if(!s)return 0;var r=s.getBoundingClientRect();return r.width>300&&r.height>150?s.querySelectorAll('.bar').length:-1})()`
		if n := eval[int](t, ctx, js); n <= 0 {
			t.Errorf("chart %s: %d bars drawn (0: missing, -1: not visible)", chart, n)
		}
	}
	p := screenshot(t, ctx, "task-run.png")
	t.Logf("task run page: %s", p)
}
