package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/metrics/promtooltest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// fixture is a real SQLite store with agents and finished tasks.
type fixture struct {
	st  store.Store
	now time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &fixture{st: st, now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
}

// agents registers n agents: pods on nodes node-0..node-(n/2-1), two per node
// (one pod, one host-network agent).
func (f *fixture) agents(t *testing.T, n int) []store.Agent {
	t.Helper()
	var as []store.Agent
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("node-%03d", i/2)
		as = append(as, store.Agent{PodUID: fmt.Sprintf("uid-%04d", i), PodName: fmt.Sprintf("agent-%04d", i), PodIP: "10.0.0.1",
			NodeName: node, HostNetwork: i%2 == 1, Status: store.AgentFree})
	}
	if err := f.st.UpsertHeartbeats(context.Background(), as, f.now); err != nil {
		t.Fatal(err)
	}
	return as
}

// finish creates one run with a task per pair and completes each with the
// result res(i).
func (f *fixture) finish(t *testing.T, pairs [][2]store.Agent, res func(i int) probe.Result) {
	t.Helper()
	ctx := context.Background()
	var tasks []store.Task
	for _, p := range pairs {
		tasks = append(tasks, store.Task{SrcPodUID: p[0].PodUID, SrcPodIP: p[0].PodIP, DstPodUID: p[1].PodUID, DstPodIP: p[1].PodIP,
			Type: "probe", Spec: json.RawMessage(`{"kind":"tcp"}`), Timeout: time.Minute})
	}
	_, stored, err := f.st.CreateRun(ctx, store.Run{Suite: "tasks"}, tasks, f.now)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]bool{}
	for i, task := range stored {
		if !claimed[task.SrcPodUID] {
			if _, err := f.st.ClaimTasks(ctx, task.SrcPodUID, f.now, 1000, time.Minute); err != nil {
				t.Fatal(err)
			}
			claimed[task.SrcPodUID] = true
		}
		r := res(i)
		b, _ := json.Marshal(r)
		f.now = f.now.Add(time.Second)
		if _, _, err := f.st.Complete(ctx, store.Report{TaskID: task.TaskID, AgentUID: task.SrcPodUID, ReportID: fmt.Sprint("r", i),
			State: store.TaskSucceeded, Result: b}, f.now); err != nil {
			t.Fatalf("complete task %d: %v", i, err)
		}
	}
}

// scrapeText serves h and returns one scrape's exposition.
func scrapeText(t *testing.T, h http.Handler) []byte {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	return body
}

// scrape parses one scrape of h.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	body := scrapeText(t, h)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func gauge(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
next:
	for _, m := range fam.GetMetric() {
		for k, v := range labels {
			if k == "quantile" && m.GetSummary() != nil {
				continue // a summary's quantile is not a label: below
			}
			if label(m, k) != v {
				continue next
			}
		}
		if s := m.GetSummary(); s != nil {
			for _, q := range s.GetQuantile() {
				if fmt.Sprint(q.GetQuantile()) == labels["quantile"] {
					return q.GetValue()
				}
			}
			continue
		}
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("metric %s%v missing", name, labels)
	return 0
}

func TestScrapeFiguresAndStates(t *testing.T) {
	f := newFixture(t)
	as := f.agents(t, 6) // node-000..node-002, a pod and a host agent on each
	pairs := [][2]store.Agent{
		{as[2], as[0]}, // pod node-001 → pod node-000: cross node
		{as[3], as[1]}, // host → host: node-node
		{as[2], as[0]}, // the same pair again: the later figure wins
		{as[4], as[0]}, // rr on node-002 → node-000
		{as[5], as[1]}, // udp node-node
	}
	f.finish(t, pairs, func(i int) probe.Result {
		switch i {
		case 3:
			return probe.Result{Kind: probe.KindRR, RTTms: &probe.Summary{P50: 0.04, P90: 0.05, P99: 0.09}}
		case 4:
			return probe.Result{Kind: probe.KindUDP, ThroughputBps: &probe.SenderReceiver{Sender: 5e8, Receiver: 4.9e8},
				LossPct: probe.Float(2), JitterMs: probe.Float(0.01)}
		}
		return probe.Result{Kind: probe.KindTCP, ThroughputBps: &probe.SenderReceiver{Sender: 1e9, Receiver: float64(i+1) * 1e9}}
	})
	exp := metrics.New(f.st, metrics.Options{})
	fams := scrape(t, exp.Handler())

	if v := gauge(t, fams, "cnperf_agents", map[string]string{"status": "free"}); v != 6 {
		t.Errorf("free agents %v, want 6", v)
	}
	if v := gauge(t, fams, "cnperf_nodes_online", nil); v != 3 {
		t.Errorf("nodes online %v, want 3", v)
	}
	if v := gauge(t, fams, "cnperf_tasks", map[string]string{"state": "succeeded"}); v != 5 {
		t.Errorf("succeeded tasks %v, want 5", v)
	}
	if v := gauge(t, fams, "cnperf_runs", map[string]string{"state": "succeeded"}); v != 1 {
		t.Errorf("succeeded runs %v, want 1", v)
	}
	cross := map[string]string{"src_node": "node-001", "dst_node": "node-000", "path": metrics.PathCrossNode, "probe": "tcp"}
	if v := gauge(t, fams, "cnperf_path_throughput_bytes_per_second", cross); v != 3e9/8 {
		t.Errorf("cross-node tcp %v B/s, want the later 3e9 bit/s in bytes", v)
	}
	nn := map[string]string{"src_node": "node-001", "dst_node": "node-000", "path": metrics.PathNodeNode, "probe": "tcp"}
	if v := gauge(t, fams, "cnperf_path_throughput_bytes_per_second", nn); v != 2e9/8 {
		t.Errorf("node-node tcp %v B/s, want 2e9 bit/s in bytes", v)
	}
	rtt := map[string]string{"src_node": "node-002", "dst_node": "node-000", "path": metrics.PathCrossNode, "probe": "rr", "quantile": "0.99"}
	if v := gauge(t, fams, "cnperf_path_rtt_seconds", rtt); math.Abs(v-0.09e-3) > 1e-12 {
		t.Errorf("rr p99 %v s, want 9e-5", v)
	}
	udp := map[string]string{"src_node": "node-002", "dst_node": "node-000", "path": metrics.PathNodeNode, "probe": "udp"}
	if v := gauge(t, fams, "cnperf_path_loss_ratio", udp); v != 0.02 {
		t.Errorf("udp loss ratio %v, want 0.02", v)
	}
	if v := gauge(t, fams, "cnperf_path_jitter_seconds", map[string]string{"src_node": "node-002", "path": metrics.PathNodeNode}); math.Abs(v-1e-5) > 1e-12 {
		t.Errorf("jitter %v s, want 1e-5", v)
	}

	// Every metric the Grafana dashboard queries is one the exporter serves.
	dash, err := os.ReadFile("../../deploy/grafana/cnperf-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(dash) {
		t.Fatal("the Grafana dashboard is not valid JSON")
	}
	names := regexp.MustCompile(`cnperf_[a-z_]+`).FindAllString(string(dash), -1)
	if len(names) < 10 {
		t.Fatalf("the dashboard queries only %d cnperf metrics", len(names))
	}
	for _, n := range names {
		if strings.HasPrefix(n, "cnperf_matrix_") || strings.HasPrefix(n, "cnperf_schedule_") {
			continue // a schedule's metrics: TestScheduleMetrics
		}
		if _, ok := fams[n]; !ok && n != "cnperf_overview" {
			t.Errorf("the Grafana dashboard queries %s, which /metrics does not serve", n)
		}
	}

	// A second scrape reads nothing new and says the same.
	again := scrape(t, exp.Handler())
	if v := gauge(t, again, "cnperf_path_throughput_bytes_per_second", cross); v != 3e9/8 {
		t.Errorf("second scrape: cross-node tcp %v B/s, want 3e9 bit/s in bytes", v)
	}
}

// With 1,000 agents on 500 nodes and more measured node pairs than the
// bound, the number of series and of values of each label stay bounded.
func TestLabelCardinalityBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: 1,000 agents and 150 tasks in SQLite take a few seconds")
	}
	f := newFixture(t)
	as := f.agents(t, 1000)
	var pairs [][2]store.Agent
	for i := 0; i < 150; i++ { // 150 distinct pod pairs on different nodes
		src, dst := as[(2*i)%1000], as[(2*i+402)%1000]
		pairs = append(pairs, [2]store.Agent{src, dst})
	}
	f.finish(t, pairs, func(i int) probe.Result {
		return probe.Result{Kind: probe.KindTCP, ThroughputBps: &probe.SenderReceiver{Receiver: 1e9}}
	})
	const maxPaths = 50
	fams := scrape(t, metrics.New(f.st, metrics.Options{MaxPaths: maxPaths}).Handler())
	if v := gauge(t, fams, "cnperf_agents", map[string]string{"status": "free"}); v != 1000 {
		t.Fatalf("free agents %v, want 1000", v)
	}
	total := 0
	values := map[string]map[string]bool{}
	pathSets := map[string]bool{}
	for name, fam := range fams {
		if !strings.HasPrefix(name, "cnperf_") {
			continue // the Go runtime's and the process's metrics
		}
		total += len(fam.GetMetric())
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if values[l.GetName()] == nil {
					values[l.GetName()] = map[string]bool{}
				}
				values[l.GetName()][l.GetValue()] = true
			}
			if name == "cnperf_path_throughput_bytes_per_second" {
				pathSets[label(m, "src_node")+"/"+label(m, "dst_node")+"/"+label(m, "path")] = true
			}
		}
	}
	if len(pathSets) != maxPaths {
		t.Errorf("%d node pairs exported, want exactly the bound %d", len(pathSets), maxPaths)
	}
	// Per path at most: 2 throughputs, 6 rtts, 2 losses, 1 jitter, 1 time.
	if bound := maxPaths*12 + 20; total > bound {
		t.Errorf("%d series, want at most %d", total, bound)
	}
	for name, max := range map[string]int{"path": 4, "probe": 4, "quantile": 3, "status": 3, "state": 7} {
		if n := len(values[name]); n > max {
			t.Errorf("label %s has %d values, want at most %d: %v", name, n, max, values[name])
		}
	}
	if v := gauge(t, fams, "cnperf_paths_evicted_total", nil); v != 150-maxPaths {
		t.Errorf("evicted %v pairs, want %d", v, 150-maxPaths)
	}
	t.Logf("1000 agents, 150 measured pairs: %d series, %d node pairs kept", total, len(pathSets))
}

// TestScrapeStamp: a stamp result exports its round trip and its loss,
// per direction too when the reflector told them apart.
func TestScrapeStamp(t *testing.T) {
	f := newFixture(t)
	as := f.agents(t, 4)
	f.finish(t, [][2]store.Agent{{as[2], as[0]}}, func(int) probe.Result {
		return probe.Result{Kind: probe.KindStamp, RTTms: &probe.Summary{P50: 0.03, P90: 0.04, P99: 0.08}, LossPct: probe.Float(3),
			Forward: &probe.Direction{LossPct: probe.Float(2)}, Reverse: &probe.Direction{LossPct: probe.Float(1)}}
	})
	fams := scrape(t, metrics.New(f.st, metrics.Options{}).Handler())
	path := map[string]string{"src_node": "node-001", "dst_node": "node-000", "path": metrics.PathCrossNode}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range path {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	if v := gauge(t, fams, "cnperf_path_rtt_seconds", with("probe", "stamp", "quantile", "0.5")); math.Abs(v-0.03e-3) > 1e-12 {
		t.Errorf("stamp rtt p50 %v s, want 3e-5", v)
	}
	for probeName, want := range map[string]float64{"stamp": 0.03, "stamp-forward": 0.02, "stamp-reverse": 0.01} {
		if v := gauge(t, fams, "cnperf_path_loss_ratio", with("probe", probeName)); math.Abs(v-want) > 1e-12 {
			t.Errorf("%s loss ratio %v, want %v", probeName, v, want)
		}
	}
}

// TestExpositionPassesPromtool: /metrics with every kind of figure passes
// `promtool check metrics` (types, names, units, help), and carries the
// Go runtime's, the process's and the build's metrics.
func TestExpositionPassesPromtool(t *testing.T) {
	f := newFixture(t)
	as := f.agents(t, 6)
	kinds := []probe.Result{
		{Kind: probe.KindTCP, ThroughputBps: &probe.SenderReceiver{Sender: 1e9, Receiver: 1e9}},
		{Kind: probe.KindUDP, ThroughputBps: &probe.SenderReceiver{Sender: 5e8, Receiver: 4.9e8}, LossPct: probe.Float(2), JitterMs: probe.Float(0.01)},
		{Kind: probe.KindRR, RTTms: &probe.Summary{P50: 0.04, P90: 0.05, P99: 0.09, Avg: 0.045, Count: 1000}},
		{Kind: probe.KindPing, RTTms: &probe.Summary{P50: 0.1, P90: 0.2, P99: 0.3, Avg: 0.12, Count: 10}, LossPct: probe.Float(0)},
		{Kind: probe.KindStamp, RTTms: &probe.Summary{P50: 0.03, P90: 0.04, P99: 0.08, Avg: 0.035, Count: 100}, LossPct: probe.Float(3),
			Forward: &probe.Direction{LossPct: probe.Float(2)}, Reverse: &probe.Direction{LossPct: probe.Float(1)}},
	}
	var pairs [][2]store.Agent
	for i := range kinds {
		pairs = append(pairs, [2]store.Agent{as[(2*i+2)%6], as[(2*i)%6]})
	}
	f.finish(t, pairs, func(i int) probe.Result { return kinds[i] })
	body := scrapeText(t, metrics.New(f.st, metrics.Options{}).Handler())
	for _, name := range []string{"cnperf_path_rtt_seconds_count", "go_goroutines", "go_build_info", "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	t.Logf("%s", promtooltest.Run(t, bytes.NewReader(body), "check", "metrics"))
}
