package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestPlainRunRows: the report of a run no suite made (plain tasks, no
// suite params) has one row per finished task with its figures, and says
// why a failed task has none; it used to print "no results yet" although
// every task had succeeded.
func TestPlainRunRows(t *testing.T) {
	stampRes, _ := json.Marshal(probe.Result{Kind: probe.KindStamp, Tool: "cnperf", RTTms: &probe.Summary{P50: 0.087, Avg: 0.09}, LossPct: probe.Float(0),
		Forward: &probe.Direction{LossPct: probe.Float(0), DSCPReceived: probe.Int(46)}})
	pingRes, _ := json.Marshal(probe.Result{Kind: probe.KindPing, Tool: "cnperf", RTTms: &probe.Summary{Avg: 0.05}})
	tasks := []api.TaskV2{
		{ID: 7, Type: "stamp", SrcPodUID: "uid-a", DstPodUID: "uid-b", State: api.StateSucceeded, Result: stampRes},
		{ID: 8, Type: "ping", SrcPodUID: "uid-b", DstPodUID: "uid-a", State: api.StateSucceeded, Result: pingRes},
		{ID: 9, Type: "rr", SrcPodUID: "uid-a", DstPodUID: "uid-b", State: api.StateFailed, Reason: "connection refused"},
		{ID: 10, Type: "rr", SrcPodUID: "uid-a", DstPodUID: "uid-b", State: api.StatePending},
	}
	run := api.Run{ID: "r1", State: api.RunFailed, Counts: map[string]int{api.StateSucceeded: 2, api.StateFailed: 1, api.StatePending: 1}, Tasks: tasks}
	rep, err := report.FromRuns(nil, run)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		conn, metric string
		want         float64
		wantErr      string
	}{
		{conn: "task 7 (stamp)", metric: "stamp.rtt_ms.p50", want: 0.087},
		{conn: "task 7 (stamp)", metric: "stamp.forward.dscp_received", want: 46},
		{conn: "task 8 (ping)", metric: "ping.rtt_ms.avg", want: 0.05},
		{conn: "task 9 (rr)", wantErr: "connection refused"},
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3 (one per finished task; the pending one has none): %+v", len(rep.Rows), rep.Rows)
	}
	for _, c := range cases {
		found := false
		for _, r := range rep.Rows {
			if r.Connection != c.conn {
				continue
			}
			found = true
			if c.wantErr != "" {
				if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], c.wantErr) {
					t.Errorf("%s: errors %v, want %q", c.conn, r.Errors, c.wantErr)
				}
				continue
			}
			if got, ok := r.Median[c.metric]; !ok || got != c.want || r.Src != "uid-a" && r.Src != "uid-b" {
				t.Errorf("%s: %s = %v (%v), src %q, want %v", c.conn, c.metric, got, ok, r.Src, c.want)
			}
		}
		if !found {
			t.Errorf("no row %q", c.conn)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "no results yet") || !strings.Contains(out, "task 7 (stamp)") || !strings.Contains(out, "87") {
		t.Errorf("text report of a plain run:\n%s", out)
	}
}

// TestLiveAndStoredPrintTheSame: the report `cnperf run` prints as a suite
// run ends (FromLive, from the runs its runner last read) and the one
// `cnperf report RUN_ID` and the dashboard print later (FromRuns, from the
// runs read again from the server) are the same bytes in every format,
// failed steps and overheads included (CSV has figures only).
func TestLiveAndStoredPrintTheSame(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"baseline", "matrix"} {
		t.Run(name, func(t *testing.T) {
			fake := suitetest.NewFakeAPI()
			fake.FailTask = 2
			s, err := builtin.Registry().Get(name)
			if err != nil {
				t.Fatal(err)
			}
			o := suite.Options{Time: time.Second, Repeat: 2, Backend: "host-gw"}
			rep, err := (&suite.Runner{API: fake, Poll: time.Millisecond}).Run(ctx, s, o)
			if err != nil {
				t.Fatal(err)
			}
			live, err := report.FromLive(builtin.Registry(), rep)
			if err != nil {
				t.Fatal(err)
			}
			var runs []api.Run
			for _, id := range rep.RunIDs {
				run, err := fake.GetRun(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, run)
			}
			stored, err := report.FromRuns(builtin.Registry(), runs...)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name  string
				write func(*report.Report, io.Writer) error
			}{
				{"text", (*report.Report).WriteText}, {"md", (*report.Report).WriteMarkdown}, {"csv", (*report.Report).WriteCSV},
				{"json", (*report.Report).WriteJSON}, {"html", (*report.Report).WriteHTML},
			} {
				var a, b bytes.Buffer
				if err := f.write(live, &a); err != nil {
					t.Fatal(err)
				}
				if err := f.write(stored, &b); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					t.Errorf("%s: live and stored differ:\n%s\n---\n%s", f.name, a.String(), b.String())
				}
				if f.name != "csv" && !strings.Contains(a.String(), "connection refused") {
					t.Errorf("%s lacks the failed step:\n%s", f.name, a.String())
				}
			}
			var text bytes.Buffer
			_ = live.WriteText(&text)
			want := map[string]string{"baseline": "VS NODE-NODE", "matrix": "cluster Gbit/s"}[name]
			if !strings.Contains(text.String(), want) {
				t.Errorf("text lacks the suite's own %q:\n%s", want, text.String())
			}
		})
	}
}

// TestPlainRunLabelsByKind: in the report of a v2 task run (tcp, udp, rr
// and ping results, no suite), each result's figures are labelled and
// charted by its kind: the udp throughput as UDP (not in the TCP chart),
// the ping's loss as ping loss (not UDP loss), no raw probe keys.
func TestPlainRunLabelsByKind(t *testing.T) {
	var tasks []api.TaskV2
	for i, res := range []*probe.Result{suitetest.FakeResult(probe.KindTCP, 9), {Kind: probe.KindUDP,
		ThroughputBps: &probe.SenderReceiver{Sender: 5e8, Receiver: 4.9e8}, LossPct: probe.Float(2), LatencyMs: &probe.Summary{Count: 31250, P50: 0.02, P99: 0.05}},
		{Kind: probe.KindRR, RTTms: &probe.Summary{Count: 900, Avg: 0.03, P50: 0.03, P99: 0.06}, TransactionsPerS: probe.Float(30000)},
		{Kind: probe.KindPing, RTTms: &probe.Summary{Count: 5, Avg: 0.05, P99: 0.07}, LossPct: probe.Float(20)}} {
		b, _ := json.Marshal(res)
		tasks = append(tasks, api.TaskV2{ID: int64(i + 1), Type: res.Kind, SrcPodUID: "uid-a", DstPodUID: "uid-b", State: api.StateSucceeded, Result: b})
	}
	rep, err := report.FromRuns(builtin.Registry(), api.Run{ID: "r1", State: api.RunSucceeded, Counts: map[string]int{api.StateSucceeded: 4}, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	lines := map[string]string{} // connection → its lines
	conn := ""
	for _, l := range strings.Split(text, "\n") {
		if c, _, ok := strings.Cut(l, " | "); ok && strings.TrimSpace(c) != "" && !strings.HasPrefix(c, " ") {
			conn = strings.TrimSpace(c)
		}
		lines[conn] += l + "\n"
	}
	for conn, want := range map[string][]string{
		"task 1 (tcp)":  {"TCP throughput, receiver | 9.00 Gbit/s"},
		"task 2 (udp)":  {"UDP throughput, receiver | 490 Mbit/s", "UDP loss                 | 2.00 %", "UDP one-way delay p50    | 20.0 µs"},
		"task 3 (rr)":   {"RR round trip p50        | 30.0 µs", "RR transactions/s        | 30.0 ktx/s"},
		"task 4 (ping)": {"Ping RTT avg             | 50.0 µs", "Ping loss                | 20.0 %"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[conn], w) {
				t.Errorf("%s lacks %q:\n%s", conn, w, lines[conn])
			}
		}
	}
	for _, bad := range []string{"latency ms", "count", "TCP throughput, receiver | 490", "UDP loss                 | 20.0"} {
		if strings.Contains(text, bad) {
			t.Errorf("text report shows %q:\n%s", bad, text)
		}
	}
	charts := map[string][]string{} // chart id → its categories and legends
	for _, c := range rep.Charts() {
		var svg bytes.Buffer
		if err := report.WriteSVG(&svg, c); err != nil {
			t.Fatal(err)
		}
		charts[c.ID] = append(charts[c.ID], svg.String())
	}
	for id, kind := range map[string]string{"bars-throughput": "tcp", "bars-udp": "udp", "bars-rtt": "rr", "bars-ping": "ping"} {
		svg := strings.Join(charts[id], "")
		if svg == "" {
			t.Errorf("no chart %s", id)
			continue
		}
		for _, k := range []string{"tcp", "udp", "rr", "ping"} {
			if has := strings.Contains(svg, "("+k+")"); has != (k == kind) {
				t.Errorf("chart %s shows a %s result: %v", id, k, has)
			}
		}
	}
}
