package bundle

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// sample is a bundle of one study on cni/backend with a capacity line.
func sample(cni, backend string, capacity float64) *Bundle {
	res := &evaluate.Result{Sheet: evaluate.Sheet{Budget: time.Minute, Lines: []evaluate.Line{
		{Question: evaluate.QCapacity, Scope: suite.PodPodCrossNode, Verdict: evaluate.Holds, Reason: "r",
			Key: &evaluate.Figure{Name: "capacity_bps", Value: capacity, Unit: "bit/s"}},
		{Question: evaluate.QIPv6, Verdict: evaluate.NotAsked, Reason: "IPv4 only"},
	}}, Reports: []suite.Report{{Suite: "capacity", RunIDs: []string{"r1"},
		Environment: &hostinfo.Environment{Platform: "lab", CNI: cni, Backend: backend},
		Rows:        []suite.Row{{Connection: suite.PodPodCrossNode, Median: map[string]float64{"capacity_bps": capacity}}}}}}
	b, err := New(res, "test", time.Unix(0, 0))
	if err != nil {
		panic(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := sample("flannel", "vxlan", 1e9).Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"schema": "cnperf.bundle/v1"`) || !strings.Contains(buf.String(), `"capacity_bps": 1000000000`) {
		t.Fatalf("no schema in %s", buf.String())
	}
	b, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Sheet.Lines) != 2 || b.Environment.CNI != "flannel" || len(b.Suites) != 1 || b.Suites[0].RunIDs[0] != "r1" {
		t.Errorf("read back %+v", b)
	}
	var text bytes.Buffer
	if err := b.WriteText(&text, builtin.Registry(), true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "HOLDS") || !strings.Contains(text.String(), "flannel") {
		t.Errorf("text:\n%s", text.String())
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"other schema": `{"schema":"cnperf.bundle/v9"}`,
		"not json":     `run 42`,
		"trailing":     `{"schema":"cnperf.bundle/v1"} {}`,
	} {
		if _, err := Decode(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCompareSeven(t *testing.T) {
	var bs []*Bundle
	for i, c := range []string{"flannel", "calico", "cilium", "kindnet", "weave", "antrea", "kube-router"} {
		bs = append(bs, sample(c, "vxlan", float64(i+1)*1e9))
	}
	c, err := Compare(bs, nil, "calico vxlan")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Columns) != 7 || c.Ref != "calico vxlan" || len(c.Lines) != 2 {
		t.Fatalf("comparison %+v", c)
	}
	capLine := c.Lines[0]
	if capLine.Question != evaluate.QCapacity || capLine.Cells[0].Ratio == nil || *capLine.Cells[0].Ratio != 0.5 || *capLine.Cells[6].Ratio != 3.5 {
		t.Errorf("capacity line %+v", capLine)
	}
	var out bytes.Buffer
	if err := c.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kube-router vxlan") || !strings.Contains(out.String(), "×3.50") {
		t.Errorf("table:\n%s", out.String())
	}
	if _, err := Compare(bs, nil, "nope"); err == nil || !strings.Contains(err.Error(), `--ref "nope"`) {
		t.Errorf("unknown ref: %v", err)
	}
	if _, err := Compare(bs, []string{"colour"}, ""); err == nil || !strings.Contains(err.Error(), `--by "colour"`) {
		t.Errorf("unknown field: %v", err)
	}
	// Two bundles of one CNI and mode stay two columns.
	c, err = Compare([]*Bundle{bs[0], bs[0]}, []string{"cni", "backend"}, "")
	if err != nil || c.Columns[1] != "flannel vxlan (2)" {
		t.Errorf("columns %v, %v", c.Columns, err)
	}
}
