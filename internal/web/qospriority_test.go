package web_test

import (
	"context"
	"html/template"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
)

// TestQoSPriorityRunPage: a stored qos-priority run is shown on the
// dashboard's run page with its own table (rows per variant and marking)
// and its verdicts, as the suite's Rows compute them from the stored run,
// not as generic connection rows.
func TestQoSPriorityRunPage(t *testing.T) {
	cl := newCluster(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := suite.Options{Time: 500 * time.Millisecond, Repeat: 1, Set: map[string]string{
		"variants": "none", "markings": "none,EF", "background-rate": "50M", "ping-interval": "200ms"}}
	rep, err := (&suite.Runner{API: cl.API, Poll: 100 * time.Millisecond}).Run(ctx, qospriority.Suite{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RunIDs) != 1 {
		t.Fatalf("runs %v, want one phase", rep.RunIDs)
	}
	hc := browserlessClient(t)
	login(t, hc, cl.URL)
	code, page := get(t, hc, cl.URL+"/runs/"+rep.RunIDs[0])
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	run, err := cl.API.GetRun(ctx, rep.RunIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	_, outs, err := suite.OutcomesFromRun(run)
	if err != nil {
		t.Fatal(err)
	}
	rows := qospriority.Suite{}.Rows(outs)
	if len(rows) != 2 {
		t.Fatalf("%d rows from the stored run, want none and EF", len(rows))
	}
	for _, want := range []string{"variant none, marking none", "variant none, marking EF"} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks the row %q", want)
		}
	}
	verdicts := qospriority.Verdicts(rows)
	if len(verdicts) != 1 || verdicts[0].Text == "" {
		t.Fatalf("verdicts %+v", verdicts)
	}
	if want := template.HTMLEscapeString(verdicts[0].Text); !strings.Contains(page, want) {
		t.Errorf("run page lacks the verdict %q", want)
	}
}
