package evaluate_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/bundle"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/evaluate"
)

func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestLabEvaluate runs `cnperf lab evaluate` with a short budget as a user
// does and checks the sheet's structure: every question has a line, each
// with a verdict word and a reason (why it was not asked, where it was
// not), the questions left out for the budget say so, and the bundle it
// wrote reads back with the same sheet. Figures are the machine's, not
// asserted. Needs root.
func TestLabEvaluate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab.json")
	stdout := cnperftest.LabCommand(t, 8*time.Minute, "evaluate", "--budget", "90s", "--time", "1s", "--json", "--out", out,
		"--pods-per-node", "2")
	var got struct {
		Schema string         `json:"schema"`
		Sheet  evaluate.Sheet `json:"sheet"`
	}
	if err := json.Unmarshal(stdout, &got); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout)
	}
	words := map[string]bool{evaluate.Holds: true, evaluate.Fails: true, evaluate.Partial: true, evaluate.Measured: true,
		evaluate.Unknown: true, evaluate.NotAsked: true}
	by := map[string]int{}
	asked := 0
	for _, l := range got.Sheet.Lines {
		by[l.Question]++
		if !words[l.Verdict] || l.Reason == "" {
			t.Errorf("line without a verdict word or a reason: %+v", l)
		}
		if l.Verdict != evaluate.NotAsked {
			asked++
		}
	}
	for _, q := range evaluate.IDs() {
		if by[q] == 0 {
			t.Errorf("question %s has no line", q)
		}
	}
	if asked == 0 {
		t.Errorf("no question was asked within 90 s")
	}
	for _, p := range got.Sheet.Plans {
		if !p.Asked && p.Reason == "" {
			t.Errorf("plan %s not asked without a reason", p.Question)
		}
	}
	b, err := bundle.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Sheet.Lines) != len(got.Sheet.Lines) || b.Environment == nil || len(b.Environment.Nodes) == 0 {
		t.Errorf("bundle: %d lines (sheet %d), environment %+v", len(b.Sheet.Lines), len(got.Sheet.Lines), b.Environment)
	}
	for _, l := range got.Sheet.Lines {
		t.Logf("%-9s %-40s %-9s %s", l.Question, l.Scope, l.Verdict, l.Reason)
	}
}
