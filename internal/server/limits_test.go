package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestLimits sends one request over each limit and gets 422 naming the
// field and the limit; nothing is stored.
func TestLimits(t *testing.T) { storetest.ForEach(t, testLimits) }

func testLimits(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.twoAgents()
	run := func(task string) string { return `{"tasks":[{"src":"pod-a","dst":"pod-b",` + task + `}]}` }
	v1 := func(typ, param string) string {
		return `[{"src_pod_uid":"uid-a","dst_pod_uid":"uid-b","task_type":"` + typ + `","task_param":"` + param + `"}]`
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	const runs, create = "/api/v2/runs", "/api/v1/external/task/create"
	cases := []struct {
		name, path, body, field, limit string
	}{
		{"probe duration", runs, run(`"spec":{"kind":"tcp","duration":"10m1s"}`), "tasks[0].spec.duration", "--max-task-duration"},
		{"tool duration", runs, run(`"type":"iperf3","param":"-t 601"`), "tasks[0].param", "--max-task-duration"},
		{"ping deadline", create, v1("ping", "-w 601"), "[0].task_param", "--max-task-duration"},
		{"probe streams", runs, run(`"spec":{"kind":"tcp","streams":33}`), "tasks[0].spec.streams", "--max-streams"},
		{"iperf3 streams", create, v1("iperf3", "-P 128"), "[0].task_param", "--max-streams"},
		{"probe rate", runs, run(`"spec":{"kind":"udp","rate_bps":100000000000000}`), "tasks[0].spec.rate_bps", "--max-rate"},
		{"iperf3 rate", create, v1("iperf3", "-u -b 200G"), "[0].task_param", "--max-rate"},
		{"udp packet rate", runs, run(`"spec":{"kind":"udp","rate_bps":10000000000,"size":100}`), "tasks[0].spec.rate_bps", "--max-packet-rate"},
		{"udp unlimited", runs, run(`"spec":{"kind":"udp","rate_bps":0}`), "tasks[0].spec.rate_bps", "--max-packet-rate"},
		{"iperf2 packet rate", create, v1("iperf", "-u -b 3Mpps"), "[0].task_param", "--max-packet-rate"},
		{"iperf3 udp unlimited", create, v1("iperf3", "-u -b 0"), "[0].task_param", "--max-packet-rate"},
		{"iperf2 udp unlimited", create, v1("iperf", "-u -b 0"), "[0].task_param", "--max-packet-rate"},
		{"iperf3 rate times streams", create, v1("iperf3", "-P 32 -b 4G"), "[0].task_param", "--max-rate"},
		{"iperf3 bit rate as packets", create, v1("iperf3", "-u -b 10G -l 100"), "[0].task_param", "--max-packet-rate"},
		{"iperf3 packets times streams", runs, run(`"type":"iperf3","param":"-u -b 1G -l 400 -P 8"`), "tasks[0].param", "--max-packet-rate"},
		{"probe ping count", runs, run(`"spec":{"kind":"ping","count":10001}`), "tasks[0].spec.count", "--max-ping-count"},
		{"ping -c", create, v1("ping", "-c 100000 -i 0.002 -s 65507"), "[0].task_param", "--max-ping-count"},
		{"probe ping interval", runs, run(`"spec":{"kind":"ping","count":5,"interval":"2ms"}`), "tasks[0].spec.interval", "--min-ping-interval"},
		{"ping -i", create, v1("ping", "-c 5 -i 0.002"), "[0].task_param", "--min-ping-interval"},
		{"probe ping size", runs, run(`"spec":{"kind":"ping","count":5,"size":65507}`), "tasks[0].spec.size", "--max-ping-size"},
		{"ping -s", create, v1("ping", "-c 5 -s 65507"), "[0].task_param", "--max-ping-size"},
		{"task timeout", runs, run(`"spec":{"kind":"rr"},"timeout":"2562047h"`), "tasks[0].timeout", "--max-task-timeout"},
		{"implied duration iperf3", create, v1("iperf3", "-t 600 -O 600"), "[0].task_param", "--max-task-duration"},
		{"implied duration ping", create, v1("ping", "-c 1000 -i 1"), "[0].task_param", "--max-task-duration"},
		{"qdisc rate floor", runs, run(`"spec":{"kind":"tcp","duration":"2s"},"qos":{"setup":"tbf","rate_bps":8000,"burst_bytes":1000}`), "tasks[0].qos.rate_bps", "--min-qdisc-rate"},
		{"qdisc lifetime", runs, run(`"spec":{"kind":"tcp","duration":"2s"},"qos":{"setup":"tbf","rate_bps":100000000,"burst_bytes":15000},"timeout":"12m"`), "tasks[0].timeout", "--max-qdisc-lifetime"},
		{"suite name", runs, `{"suite":"` + long(254) + `","tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"}}]}`, "suite", "limit of 253"},
		{"agent reference", runs, run(`"spec":{"kind":"rr"},"src":"` + long(254) + `"`), "tasks[0].src", "limit of 253"},
		{"v1 uid", create, `[{"src_pod_uid":"` + long(129) + `","dst_pod_uid":"uid-b","task_type":"ping"}]`, "[0].src_pod_uid", "limit of 128"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do("POST", c.path, userTok, []byte(c.body))
			if code != 422 || !strings.Contains(string(body), c.field) || !strings.Contains(string(body), c.limit) {
				t.Errorf("%d %.400s; want 422 naming %q and %q", code, body, c.field, c.limit)
			}
		})
	}
	if n := f.taskTotal(); n != 0 {
		t.Errorf("%d tasks stored by requests over a limit", n)
	}
	if _, total, _ := f.st.ListRuns(context.Background(), store.RunFilter{}, store.Page{}); total != 0 {
		t.Errorf("%d runs stored by requests over a limit", total)
	}
}

// TestLimitsAdmit: what is within every limit passes the same check
// (unlimited TCP, UDP paced by --fq-rate, rates that stay under the
// limits once multiplied by the streams).
func TestLimitsAdmit(t *testing.T) {
	l := DefaultLimits().withDefaults()
	for _, c := range []struct{ tool, param string }{
		{"iperf3", "-P 32"},
		{"iperf3", "-P 32 -b 3G"},
		{"iperf3", "-u -b 100M -P 4"},
		{"iperf3", "-u -b 0 --fq-rate 100M"},
		{"iperf3", "-u -P 16 -l 1400"},
		{"iperf", "-u -b 100kpps"},
		{"iperf", "-t 5"},
		{"ping", "-c 100 -i 0.01"},
	} {
		if err := l.checkTool("param", c.tool, c.param); err != nil {
			t.Errorf("%s %q: %v", c.tool, c.param, err)
		}
	}
	rate := func(v uint64) *uint64 { return &v }
	for _, sp := range []probe.Spec{
		{Kind: probe.KindTCP, Streams: 32},
		{Kind: probe.KindTCP, Streams: 32, RateBps: rate(90_000_000_000)},
		{Kind: probe.KindUDP},
		{Kind: probe.KindUDP, RateBps: rate(10_000_000_000), Size: 1400},
	} {
		if err := l.checkSpec("spec.", sp); err != nil {
			t.Errorf("%+v: %v", sp, err)
		}
	}
}

// TestLimitsConfigured: tasks per request and runs in flight follow the
// server's configured limits.
func TestLimitsConfigured(t *testing.T) { storetest.ForEach(t, testLimitsConfigured) }

func testLimitsConfigured(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.srv.opts.Limits.MaxTasks = 3
	f.srv.opts.Limits.MaxRunsInFlight = 2
	f.twoAgents()
	tasks := func(n int) string {
		ts := make([]string, n)
		for i := range ts {
			ts[i] = `{"src":"pod-a","dst":"pod-b","spec":{"kind":"ping","count":1}}`
		}
		return `{"tasks":[` + strings.Join(ts, ",") + `]}`
	}
	if code, body := f.do("POST", "/api/v2/runs", userTok, []byte(tasks(4))); code != 422 || !strings.Contains(string(body), "--max-tasks-per-request") {
		t.Errorf("4 tasks with a limit of 3: %d %s", code, body)
	}
	v1 := `[` + strings.Repeat(`{"src_pod_uid":"uid-a","dst_pod_uid":"uid-b","task_type":"ping"},`, 3) + `{"src_pod_uid":"uid-a","dst_pod_uid":"uid-b","task_type":"ping"}]`
	if code, body := f.do("POST", "/api/v1/external/task/create", userTok, []byte(v1)); code != 422 || !strings.Contains(string(body), "--max-tasks-per-request") {
		t.Errorf("4 v1 tasks with a limit of 3: %d %s", code, body)
	}
	for i := range 2 {
		if code, body := f.do("POST", "/api/v2/runs", userTok, []byte(tasks(3))); code != 201 {
			t.Fatalf("run %d within the limits: %d %s", i, code, body)
		}
	}
	code, body := f.do("POST", "/api/v2/runs", userTok, []byte(tasks(1)))
	if code != 422 || !strings.Contains(string(body), "runs_in_flight") || !strings.Contains(string(body), "--max-runs-in-flight") {
		t.Errorf("third run with 2 in flight: %d %s", code, body)
	}
	if n := f.taskTotal(); n != 6 {
		t.Errorf("%d tasks stored, want the 6 of the two runs", n)
	}
}

// TestAgentLimits: heartbeat field lengths, the agents held in memory,
// pruning of agents gone offline, and fetches by unknown uids.
func TestAgentLimits(t *testing.T) { storetest.ForEach(t, testAgentLimits) }

func testAgentLimits(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.srv.opts.Limits.MaxAgents = 2
	f.twoAgents()
	hb := func(uid, name string) []byte {
		return fmt.Appendf(nil, `{"pod_uid":%q,"pod_name":%q,"pod_ip":"10.244.3.3","node_name":"node-3"}`, uid, name)
	}
	long := strings.Repeat("p", 100<<10)
	cases := []struct {
		name, method, path string
		body               []byte
		want               int
		field, limit       string
	}{
		{"pod_name of 100 KiB", "POST", "/api/v2/agent/heartbeat", hb("uid-c", long), 422, "pod_name", "limit of 253"},
		{"pod_uid of 129", "POST", "/api/v1/internal/heartbeat", hb(strings.Repeat("u", 129), "pod-c"), 422, "pod_uid", "limit of 128"},
		{"a third agent", "POST", "/api/v2/agent/heartbeat", hb("uid-c", "pod-c"), 422, "pod_uid", "--max-agents"},
		{"report reason of 4 KiB + 1", "POST", "/api/v2/agent/tasks/t1/report", fmt.Appendf(nil, `{"pod_uid":"uid-a","report_id":"r","state":"failed","reason":%q}`, strings.Repeat("r", 4097)), 422, "reason", "limit of 4096"},
		{"fetch by an unknown uid", "GET", "/api/v2/agent/tasks?pod_uid=made-up", nil, 404, "pod_uid", "heartbeat first"},
		{"v1 fetch by an unknown uid", "GET", "/api/v1/internal/get_tasks?pod_uid=made-up-2", nil, 404, "", "heartbeat first"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, agentTok, c.body)
			if code != c.want || !strings.Contains(string(body), c.field) || !strings.Contains(string(body), c.limit) {
				t.Errorf("%d %.300s; want %d naming %q and %q", code, body, c.want, c.field, c.limit)
			}
		})
	}
	f.srv.disp.mu.Lock()
	_, a := f.srv.disp.wake["made-up"]
	_, b := f.srv.disp.wake["made-up-2"]
	f.srv.disp.mu.Unlock()
	if a || b {
		t.Error("fetches by unknown uids left wake-up channels behind")
	}
	as, _ := f.st.ListAgents(context.Background(), store.AgentFilter{IncludeOffline: true})
	if len(as) != 2 {
		t.Errorf("%d agents stored, want 2", len(as))
	}
	// Agent b goes silent: the reaper marks it offline and prunes what the
	// server held for it, which makes room for the third agent.
	f.clock.Add(6 * time.Second)
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	f.clock.Add(6 * time.Second)
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	if res, err := f.srv.Reap(context.Background()); err != nil || len(res.Offline) != 1 || res.Offline[0].PodUID != "uid-b" {
		t.Fatalf("reap: %+v %v; want uid-b offline", res.Offline, err)
	}
	f.srv.disp.mu.Lock()
	_, held := f.srv.disp.wake["uid-b"]
	f.srv.disp.mu.Unlock()
	if held || f.srv.beats.online("uid-b") {
		t.Error("state of the offline agent uid-b still held")
	}
	if code, body := f.do("POST", "/api/v2/agent/heartbeat", agentTok, hb("uid-c", "pod-c")); code != 200 {
		t.Errorf("third agent after one went offline: %d %s", code, body)
	}
}
