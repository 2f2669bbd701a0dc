package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

func get(t *testing.T, hc *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrf(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	_, body := get(t, hc, base+"/")
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the overview")
	}
	return m[1]
}

func TestLoginAndOverview(t *testing.T) {
	cl := newCluster(t, 2, 2)
	hc := browserlessClient(t)

	resp, err := hc.Get(cl.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("overview without login: %d to %q, want 303 to /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = hc.PostForm(cl.URL+"/login", url.Values{"token": {"wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "Wrong token") {
		t.Fatalf("wrong token: status %d, want 401 with a message", resp.StatusCode)
	}
	login(t, hc, cl.URL)
	code, body := get(t, hc, cl.URL+"/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	if n := strings.Count(body, `<tr class="agent" data-status="free">`); n != 6 {
		t.Errorf("%d free agents on the overview, want 6", n)
	}
	for _, want := range []string{`data-node="node1"`, `data-node="node2"`, "6</b> online of 6 agents on 2 nodes", `id="start-form"`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	// The bearer token works too, without a session.
	req, _ := http.NewRequest(http.MethodGet, cl.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer "+userToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("overview with the bearer token: %d", resp.StatusCode)
	}
	// Logging out ends the session.
	form := url.Values{"csrf": {csrf(t, hc, cl.URL)}}
	resp, err = hc.PostForm(cl.URL+"/logout", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := get(t, hc, cl.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("overview after logout: %d, want 303 to the login", code)
	}
}

// A run started from the dashboard finishes, and its page shows the same
// figures the API has, with its charts.
func TestBaselineFromDashboard(t *testing.T) {
	cl := newCluster(t, 2, 2)
	hc := browserlessClient(t)
	login(t, hc, cl.URL)
	form := url.Values{"csrf": {csrf(t, hc, cl.URL)}, "suite": {"baseline"}, "time": {"300ms"}, "repeat": {"1"}, "backend": {"loopback"}}
	resp, err := hc.PostForm(cl.URL+"/start", form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/runs/") {
		t.Fatalf("start: %d to %q, want 303 to the run: %s", resp.StatusCode, loc, b)
	}
	id := strings.TrimPrefix(loc, "/runs/")
	run := cl.waitRun(t, id, 90*time.Second)
	if run.State != api.RunSucceeded {
		t.Fatalf("run %s ended %s: %v", id, run.State, run.Counts)
	}
	code, page := get(t, hc, cl.URL+loc)
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	_, outs, err := suite.OutcomesFromRun(run)
	if err != nil {
		t.Fatal(err)
	}
	rows := suite.Rows(outs)
	if len(rows) != 3 {
		t.Fatalf("%d rows from the API, want 3 connections", len(rows))
	}
	for _, row := range rows {
		for _, m := range []string{"throughput_bps.receiver", "rtt_ms.p50"} {
			v, ok := row.Median[m]
			if !ok {
				t.Errorf("%s: API row lacks %s (errors %v)", row.Connection, m, row.Errors)
				continue
			}
			want := report.FormatRange(v, row.Min[m], row.Max[m], report.Info(m).Unit)
			if !strings.Contains(page, want) {
				t.Errorf("%s %s: the run page does not show the API's %q", row.Connection, m, want)
			}
		}
	}
	for _, id := range []string{`id="bars-throughput"`, `id="bars-rtt"`, `id="throughput-time"`, `id="cdf-rtt"`} {
		if !strings.Contains(page, id) {
			t.Errorf("run page lacks chart %s", id)
		}
	}
	if strings.Contains(page, `http-equiv="refresh"`) {
		t.Error("a finished run's page still reloads itself")
	}
	// The downloads carry the same figures.
	code, csv := get(t, hc, cl.URL+loc+"/report?format=csv")
	if code != http.StatusOK || !strings.Contains(csv, "throughput_bps.receiver") {
		t.Errorf("csv download: %d %q", code, csv[:min(len(csv), 200)])
	}
	code, js := get(t, hc, cl.URL+loc+"/report?format=iperf3")
	var docs []map[string]any
	if code != http.StatusOK || json.Unmarshal([]byte(js), &docs) != nil || len(docs) != 6 {
		t.Errorf("iperf3 download: %d, %d documents, want 6 (3 tcp, 3 udp)", code, len(docs))
	}
}

func TestBadInputNeverA500(t *testing.T) {
	cl := newCluster(t, 1, 1)
	hc := browserlessClient(t)
	login(t, hc, cl.URL)
	ctx := context.Background()

	// A plain task run and a suite-like run that stays in progress: its
	// source agent is registered but never fetches.
	idle := api.Heartbeat{PodName: "idle", PodUID: "uid-idle", PodIP: "127.0.0.1", NodeName: "node9", ResponderAddr: "127.0.0.1:9"}
	ac := cl.agentClient(t)
	if _, err := ac.Heartbeat(ctx, idle); err != nil {
		t.Fatal(err)
	}
	spec := probe.Spec{Kind: probe.KindTCP, Duration: probe.Duration(time.Second)}
	params, _ := json.Marshal(suite.RunParams{APIVersion: suite.ParamsAPIVersion, Suite: "baseline", Phases: 1,
		Options: suite.DefaultOptions(), Steps: []suite.Step{{Connection: suite.PodPodSameNode, Measure: suite.MeasureTCP, Spec: spec}}})
	live, err := cl.API.CreateRun(ctx, api.RunCreate{Suite: "baseline", Params: params, Tasks: []api.RunTask{{Src: "uid-idle", Dst: "uid-n1-p0", Spec: &spec}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := cl.API.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: "uid-idle", Dst: "uid-n1-p0", Spec: &spec}}})
	if err != nil {
		t.Fatal(err)
	}
	tok := csrf(t, hc, cl.URL)

	tests := []struct {
		name   string
		method string
		path   string
		form   url.Values
		status int
		says   string
	}{
		{"unknown run", "GET", "/runs/no-such-run", nil, 404, `no run &#34;no-such-run&#34;`},
		{"malformed run id", "GET", "/runs/bad%20id%3B", nil, 400, "only letters, digits"},
		{"unknown report format", "GET", "/runs/" + live.ID + "/report?format=xml", nil, 400, `format &#34;xml&#34;`},
		{"report of an unknown run", "GET", "/runs/nope/report?format=csv", nil, 404, "no run"},
		{"iperf3 of a run without results", "GET", "/runs/" + live.ID + "/report?format=iperf3", nil, 422, "no tcp or udp results"},
		{"run in progress", "GET", "/runs/" + live.ID, nil, 200, "still in progress"},
		{"compare one run", "GET", "/compare?run=" + live.ID, nil, 400, "compare needs 2 to 6 runs"},
		{"compare seven runs", "GET", "/compare?run=a&run=b&run=c&run=d&run=e&run=f&run=g", nil, 400, "compare needs 2 to 6 runs"},
		{"compare an unknown run", "GET", "/compare?run=" + live.ID + "&run=ghost", nil, 404, `no run &#34;ghost&#34;`},
		{"compare different suites", "GET", "/compare?run=" + live.ID + "&run=" + plain.ID, nil, 400, "different suite"},
		{"compare bad tolerance", "GET", "/compare?run=" + live.ID + "&run=" + plain.ID + "&tolerance=lots", nil, 400, "tolerance"},
		{"overview page not a number", "GET", "/?page=abc", nil, 400, "whole number"},
		{"overview page zero", "GET", "/?page=0", nil, 400, "whole number"},
		{"overview page past the end", "GET", "/?page=999", nil, 404, "only 2 runs"},
		{"start without csrf", "POST", "/start", url.Values{"suite": {"baseline"}}, 403, "CSRF"},
		{"start unknown suite", "POST", "/start", url.Values{"csrf": {tok}, "suite": {"nope"}}, 400, `suite &#34;nope&#34;`},
		{"start bad time", "POST", "/start", url.Values{"csrf": {tok}, "suite": {"baseline"}, "time": {"banana"}}, 400, "want a duration"},
		{"start bad repeat", "POST", "/start", url.Values{"csrf": {tok}, "suite": {"baseline"}, "repeat": {"0"}}, 400, "repeat 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			var err error
			if tc.method == "POST" {
				resp, err = hc.PostForm(cl.URL+tc.path, tc.form)
			} else {
				resp, err = hc.Get(cl.URL + tc.path)
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d; page: %s", resp.StatusCode, tc.status, excerpt(string(b)))
			}
			if !strings.Contains(string(b), tc.says) {
				t.Errorf("page does not say %q: %s", tc.says, excerpt(string(b)))
			}
		})
	}
	// The in-progress page reloads itself and shows its progress.
	_, body := get(t, hc, cl.URL+"/runs/"+live.ID)
	for _, want := range []string{`http-equiv="refresh"`, "0/1 measurements", `id="no-results"`} {
		if !strings.Contains(body, want) {
			t.Errorf("in-progress run page lacks %q", want)
		}
	}
}

func excerpt(s string) string {
	if i := strings.Index(s, "<main>"); i >= 0 {
		s = s[i:]
	}
	if len(s) > 600 {
		s = s[:600]
	}
	return s
}
