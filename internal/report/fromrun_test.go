package report_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
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
		{conn: "task 7 (stamp)", metric: "rtt_ms.p50", want: 0.087},
		{conn: "task 7 (stamp)", metric: "forward.dscp_received", want: 46},
		{conn: "task 8 (ping)", metric: "rtt_ms.avg", want: 0.05},
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
