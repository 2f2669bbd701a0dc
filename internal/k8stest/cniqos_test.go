package k8stest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/suite/cniqos"
)

// runCNIQoS runs the cni-qos suite on the cluster's CNI: one row per
// feature of the suite's table for this CNI, each with a verdict. What
// holds on any machine is asserted: every feature has its row; Calico's
// bandwidth, packet-rate and connection limits are not bypassed (no "no
// effect": what arrives or connects is bounded by the limit, however
// slow the machine); Calico's DSCP annotation marks what goes to the
// other node's own address (the underlay) and not what goes to a pod;
// the annotated pods are gone afterwards. The figures (rate held, time
// to conform, packets per second, connections held) are logged.
func runCNIQoS(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	out, errOut, err := cnp(15*time.Minute, "run", "cni-qos", "--k8s", "--time", "8s", "--repeat", "1", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run cni-qos --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows    []row             `json:"rows"`
		Kernels []k8s.KernelTC    `json:"node_kernels"`
		Shaped  []json.RawMessage `json:"shaped_pods"`
		First   json.RawMessage   `json:"shaping_qdiscs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	t.Logf("cni-qos on %s in %v; kernels as detected: %+v", want, time.Since(t0).Round(time.Second), res.Kernels)
	verdicts := []string{cniqos.Works, cniqos.Caveat, cniqos.NoEffect, cniqos.Untried, cniqos.None}
	got := map[string]row{}
	for _, r := range res.Rows {
		f := r.Labels[cniqos.LabelFeature]
		got[f] = r
		t.Logf("VERDICT %s | %s | %s | %s | %s", want, f, r.Labels[cniqos.LabelSet], r.Labels[cniqos.LabelVerdict], r.Labels[cniqos.LabelWhy])
		if !slices.Contains(verdicts, r.Labels[cniqos.LabelVerdict]) {
			t.Errorf("%s: verdict %q (%s), want one of %v", f, r.Labels[cniqos.LabelVerdict], r.Labels[cniqos.LabelWhy], verdicts)
		}
	}
	for _, f := range cniqos.For(want.Name) {
		r, ok := got[f.Name]
		if !ok {
			t.Errorf("no row for %s's %s", want.Name, f.Name)
			continue
		}
		switch f.Class {
		case cniqos.ClassBandwidth, cniqos.ClassPacketRate, cniqos.ClassConnections:
			if want.Name == "calico" && r.Labels[cniqos.LabelVerdict] == cniqos.NoEffect {
				t.Errorf("%s: Calico's limit had no effect: %s", f.Name, r.Labels[cniqos.LabelWhy])
			}
		case cniqos.ClassDSCP:
			if want.Name != "calico" {
				continue
			}
			leaving, okL := r.Median["dscp_received.leaving"]
			pod, okP := r.Median["dscp_received.pod"]
			if !okL || leaving != f.Value || !okP || pod != 0 {
				t.Errorf("%s: arrived at the other node's address as %v (%v), at a pod as %v (%v); want %v leaving the cluster, 0 to a pod",
					f.Name, leaving, okL, pod, okP, f.Value)
			}
		}
	}
	// The annotated pods are removed after their phase.
	pods, err := kc.Kube.CoreV1().Pods(k8s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=shaped"})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			left = append(left, p.Name)
		}
	}
	if len(left) > 0 {
		t.Errorf("annotated pods left after the run: %s", strings.Join(left, ", "))
	}
	t.Logf("annotated pods started and removed: %d (the first: %s)", max(len(res.Shaped), min(1, len(res.First))), res.First)
	recordVerified(t, want, res.Rows)
}

// recordVerified keeps docs/qos.md's table of verified features current:
// a passing run merges its rows (this CNI and mode) into
// docs/cni-qos-verified.json and rewrites the table from it (the docs'
// test holds the two together).
func recordVerified(t *testing.T, want CNIFacts, rows []row) {
	if t.Failed() {
		t.Logf("cni-qos record not updated: the run failed")
		return
	}
	var vs []cniqos.Verified
	for _, r := range rows {
		vs = append(vs, cniqos.NewVerified(want.Name, want.Backend, r.Labels, r.Median))
	}
	docs := filepath.Join("..", "..", "docs")
	if err := cniqos.UpdateVerified(filepath.Join(docs, "cni-qos-verified.json"), filepath.Join(docs, "qos.md"), want.Name, want.Backend, vs); err != nil {
		t.Errorf("cni-qos record: %v", err)
		return
	}
	t.Logf("cni-qos record: %s %s's %d rows in docs/cni-qos-verified.json and docs/qos.md's table", want.Name, want.Backend, len(vs))
}
