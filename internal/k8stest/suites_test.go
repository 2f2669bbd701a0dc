package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
)

// EnvCNI chooses the real-cluster test's CNI: "flannel" (the default: the
// real flannel daemon, vxlan and then host-gw), "calico" (Calico, vxlan and
// then direct) or "bridge" (the harness's own conflist and routes, no CNI
// daemon). `make test-k8s` runs the test once per CNI.
const EnvCNI = "CNPERF_K8S_CNI"

// EnvReport names the file the real-cluster test writes its record to:
// the cluster's facts and, per suite run, its CNI, backend, run ids and
// rows (as `cnperf run --json` prints them).
const EnvReport = "CNPERF_K8S_REPORT"

type cnpFunc func(time.Duration, ...string) (string, string, error)

// harnessCNI is the CNI the test brings the cluster up with; it runs the
// suites on each of its Backends in order.
func harnessCNI() (CNI, error) {
	cni, err := CNINamed(os.Getenv(EnvCNI))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCNI, err)
	}
	return cni, nil
}

// clusterRecord is the file EnvReport names. `make test-k8s` runs the
// test once per CNI, each on its own cluster, into one file: write merges
// (a run replaces the suites of its own CNI and keeps the others').
type clusterRecord struct {
	// Cluster is the facts of the first cluster recorded (kept for
	// readers of the one-CNI record); Clusters holds each CNI's.
	Cluster  json.RawMessage            `json:"cluster"`
	Clusters map[string]json.RawMessage `json:"clusters,omitempty"`
	Suites   []suiteRecord              `json:"suites"`
}

type suiteRecord struct {
	Suite      string            `json:"suite"`
	CNI        string            `json:"cni"`
	CNIVersion string            `json:"cni_version,omitempty"`
	Backend    string            `json:"backend"`
	RunIDs     []string          `json:"run_ids"`
	Rows       []json.RawMessage `json:"rows"`
}

// add records one suite run from its --json output.
func (r *clusterRecord) add(t *testing.T, cni CNIFacts, out string) {
	var o struct {
		Suite   string            `json:"suite"`
		RunIDs  []string          `json:"run_ids"`
		Rows    []json.RawMessage `json:"rows"`
		Cluster json.RawMessage   `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Errorf("record: %v", err)
		return
	}
	if r.Cluster == nil {
		r.Cluster = o.Cluster
	}
	if r.Clusters == nil {
		r.Clusters = map[string]json.RawMessage{}
	}
	if _, ok := r.Clusters[cni.Name]; !ok && o.Cluster != nil {
		r.Clusters[cni.Name] = o.Cluster
	}
	r.Suites = append(r.Suites, suiteRecord{Suite: o.Suite, CNI: cni.Name, CNIVersion: cni.Version, Backend: cni.Backend, RunIDs: o.RunIDs, Rows: o.Rows})
}

// write writes the record to path, merged with what is there: suites and
// cluster facts of other CNIs stay, this record's CNIs' are replaced.
func (r *clusterRecord) write(path string) error {
	merged := *r
	if b, err := os.ReadFile(path); err == nil {
		var old clusterRecord
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("existing record %s: %w", path, err)
		}
		merged = mergeRecords(old, *r)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// mergeRecords is old with the suites and facts of the CNIs in cur
// replaced by cur's.
func mergeRecords(old, cur clusterRecord) clusterRecord {
	mine := map[string]bool{}
	for _, s := range cur.Suites {
		mine[s.CNI] = true
	}
	for cni := range cur.Clusters {
		mine[cni] = true
	}
	out := clusterRecord{Cluster: old.Cluster, Clusters: map[string]json.RawMessage{}}
	for cni, f := range old.Clusters {
		if !mine[cni] {
			out.Clusters[cni] = f
		}
	}
	for cni, f := range cur.Clusters {
		out.Clusters[cni] = f
	}
	for _, s := range old.Suites {
		if !mine[s.CNI] {
			out.Suites = append(out.Suites, s)
		}
	}
	out.Suites = append(out.Suites, cur.Suites...)
	if out.Cluster == nil {
		out.Cluster = cur.Cluster
	}
	return out
}

// checkFacts: `cnperf k8s status --facts` names the cluster, the nodes,
// the CNI, its backend and its plugins.
func checkFacts(t *testing.T, cnp cnpFunc, cniDir string, want CNIFacts) {
	t.Helper()
	out, _, err := cnp(3*time.Minute, "k8s", "status", "--facts", "--cni-conf-dir", cniDir)
	if err != nil {
		t.Fatalf("cnperf k8s status: %v\n%s", err, out)
	}
	t.Logf("cnperf k8s status --facts:\n%s", out)
	wants := append([]string{"v1.34", "iptables", "kcn-node1", "kcn-node2", "CNI " + want.Name}, want.Plugins...)
	if want.Backend != "" {
		wants = append(wants, "backend "+want.Backend)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("status output lacks %q", w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkCNILabels: every row names the CNI and backend it ran on.
func checkCNILabels(t *testing.T, rows []row, want CNIFacts) {
	t.Helper()
	for _, r := range rows {
		if r.Labels["cni"] != want.Name || r.Labels["backend"] != want.Backend {
			t.Errorf("row %s: cni %q backend %q, want %q %q", r.Connection, r.Labels["cni"], r.Labels["backend"], want.Name, want.Backend)
		}
		// The CNI's release as the cluster shows it (Calico's
		// ClusterInformation; flannel's and Cilium's DaemonSet image).
		if want.Version != "" && r.Labels["cni_version"] != want.Version {
			t.Errorf("row %s: cni_version %q, want %q", r.Connection, r.Labels["cni_version"], want.Version)
		}
	}
}

// runBaseline runs the baseline on the cluster (four connections, the
// Service path among them, positive figures), records it and returns its
// run id.
func runBaseline(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) string {
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "baseline", "--k8s", "--time", "2s", "--repeat", "1", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run baseline --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		RunID   string `json:"run_id"`
		Rows    []row  `json:"rows"`
		Cluster k8s.Facts
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	if e := strings.TrimSpace(errOut); e != "" {
		t.Logf("cnperf run baseline --k8s stderr:\n%s", e)
	}
	t.Logf("baseline --k8s in %v: run %s, cluster %s, CNI %s, backend %s, pod MTU %d, kube-proxy %s", time.Since(t0).Round(time.Second), res.RunID,
		res.Cluster.KubernetesVersion, res.Cluster.CNI, res.Cluster.Backend, res.Cluster.PodMTU, res.Cluster.ProxyMode)
	got := map[string]row{}
	for _, r := range res.Rows {
		got[r.Connection] = r
		t.Logf("%-20s tcp %8.0f Mbit/s  udp loss %5.2f %%  rtt avg %.3f ms  (%s -> %s)", r.Connection,
			r.Median["throughput_bps.receiver"]/1e6, r.Median["loss_pct"], r.Median["rtt_ms.avg"], r.Src, r.Dst)
	}
	conns := []string{"pod-pod same node", "pod-pod cross node", "node-node", "pod-service"}
	for _, conn := range conns {
		r, ok := got[conn]
		if !ok {
			t.Errorf("no %q row", conn)
			continue
		}
		for _, k := range []string{"throughput_bps.receiver", "throughput_bps.sender", "rtt_ms.avg", "udp.throughput_bps.receiver"} {
			if !(r.Median[k] > 0) {
				t.Errorf("%s: %s = %v, want positive", conn, k, r.Median[k])
			}
		}
	}
	checkServiceRow(ctx, t, kc, got["pod-service"], got["pod-pod cross node"])
	// The record holds the same four rows.
	if n := len(rec.Suites); n == 0 || len(rec.Suites[n-1].Rows) < len(conns) {
		t.Errorf("record: the baseline's rows missing (%d suites)", n)
	} else {
		recorded := map[string]bool{}
		for _, raw := range rec.Suites[n-1].Rows {
			var r row
			if err := json.Unmarshal(raw, &r); err == nil {
				recorded[r.Connection] = true
			}
		}
		for _, conn := range conns {
			if !recorded[conn] {
				t.Errorf("record: baseline on %s has no %q row", want.Backend, conn)
			}
		}
	}
	checkCNILabels(t, res.Rows, want)
	if want.Backend != "" && res.Cluster.Backend != want.Backend {
		t.Errorf("facts: backend %q, want %q", res.Cluster.Backend, want.Backend)
	}
	// The pods' veths have the CNI's MTU (after a backend switch: the new
	// one, so the pods really were given the new network).
	if want.PodMTU != 0 && res.Cluster.PodMTU != want.PodMTU {
		t.Errorf("facts: pod MTU %d, want the CNI's %d", res.Cluster.PodMTU, want.PodMTU)
	}
	t.Logf("cnperf report %s (the stored run, read back from the in-cluster server):\n%s", res.RunID, storedReport(ctx, t, kc, cnp, res.RunID))
	if res.Cluster.KubernetesVersion == "" || len(res.Cluster.Nodes) != 2 {
		t.Errorf("cluster facts missing: %+v", res.Cluster)
	}
	return res.RunID
}

// checkServiceRow checks the pod-service row: the probes went to a
// ClusterIP of the cluster's service range (10.97.0.0/16) through a
// Service in front of the cross-node row's destination pod, the row
// carries what the Service costs against pod-pod cross node, and the
// Service and the pod's label are gone after the run.
func checkServiceRow(ctx context.Context, t *testing.T, kc *k8s.Client, svc, cross row) {
	t.Helper()
	via, dst, ok := strings.Cut(svc.Dst, " -> ")
	if !ok || !strings.HasPrefix(via, "10.97.") || dst != cross.Dst {
		t.Errorf("pod-service dst %q: want a ClusterIP in 10.97.0.0/16, then the cross-node destination %q", svc.Dst, cross.Dst)
	}
	if _, ok := svc.Median["service_overhead.tcp_pct"]; !ok {
		t.Errorf("pod-service row lacks service_overhead.tcp_pct: %v", svc.Median)
	}
	t.Logf("pod-service via %s: TCP %.0f Mbit/s (cross node %.0f), rr p50 %.3f ms (cross node %.3f), service_overhead: tcp %.1f %%, udp %.1f %%, rr %+.3f ms",
		via, svc.Median["throughput_bps.receiver"]/1e6, cross.Median["throughput_bps.receiver"]/1e6, svc.Median["rtt_ms.p50"], cross.Median["rtt_ms.p50"],
		svc.Median["service_overhead.tcp_pct"], svc.Median["service_overhead.udp_pct"], svc.Median["service_overhead.rr_added_ms"])
	svcs, err := kc.Kube.CoreV1().Services(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: k8s.RunServiceLabel + "=true"})
	if err != nil || len(svcs.Items) != 0 {
		t.Errorf("run Services left after the baseline: %d (%v)", len(svcs.Items), err)
	}
	pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: k8s.ServiceSelectorLabel})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods still labelled for a run Service after the baseline: %d (%v)", len(pods.Items), err)
	}
}

// runShaping runs shaping with a 10M egress annotation, the peer on the
// shaped pod's node and on the other node: the CNI's qdiscs named, the
// limit enforced at the receiver, rows and a verdict per placement.
func runShaping(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "shaping", "--k8s", "--time", "4s", "--repeat", "1", "--set", "placement=same-node,cross-node",
		"--set", "egress-bandwidth=10M", "--set", "protos=tcp,udp", "--set", "loads=above", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run shaping --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		RunID   string `json:"run_id"`
		Rows    []row  `json:"rows"`
		Shaping struct {
			Pod   string       `json:"pod"`
			Links []k8s.LinkTC `json:"links"`
		} `json:"shaping_qdiscs"`
		Drain *row `json:"shaping_drain"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	t.Logf("shaping --k8s in %v; qdiscs the CNI installed for %s:\n  %s", time.Since(t0).Round(time.Second), res.Shaping.Pod,
		strings.Join(k8s.DescribeQdiscs(res.Shaping.Links), "\n  "))
	var ingressRedirect, tbf10M bool
	for _, l := range res.Shaping.Links {
		for _, q := range l.Qdiscs {
			if q.Kind == "ingress" && l.RedirectTo != "" {
				ingressRedirect = true
			}
			if q.Kind == "tbf" && q.RateBps == 10e6 && l.Type == "ifb" {
				tbf10M = true
			}
		}
	}
	if !ingressRedirect || !tbf10M {
		t.Errorf("want an ingress qdisc with a mirred redirect on the host veth and a 10Mbit tbf on an ifb; got %+v", res.Shaping.Links)
	}
	t.Logf("cnperf report %s:\n%s", res.RunID, storedReport(ctx, t, kc, cnp, res.RunID))
	if res.Drain == nil {
		t.Fatal("no shaping_drain row")
	}
	t.Logf("burst drain (one unthrottled TCP flow first): %.1f Mbit/s at the receiver", res.Drain.Median["throughput_bps.receiver"]/1e6)
	if len(res.Rows) == 0 {
		t.Fatal("no rows")
	}
	checkCNILabels(t, res.Rows, want)
	verdicts := map[string]string{}
	for _, r := range res.Rows {
		verdicts[r.Labels["placement"]] = r.Labels["verdict"]
	}
	for _, p := range []string{"same-node", "cross-node"} {
		t.Logf("%s: %s", p, verdicts[p])
		if verdicts[p] == "" {
			t.Errorf("no rows with a verdict for the %s placement (verdicts %v)", p, verdicts)
		}
	}
	for _, r := range res.Rows {
		ss := r.Median["steady_state_bps"]
		t.Logf("%s %s %s load %s: steady state %.2f Mbit/s, first interval %.2f Mbit/s, limit %.0f Mbit/s", r.Labels["placement"], r.Labels["direction"],
			r.Labels["proto"], r.Labels["load"], ss/1e6, r.Median["first_interval_bps"]/1e6, r.Median["limit_bps"]/1e6)
		if want.Name == "cilium" {
			// Measured on Cilium v1.20.2 in both modes: the bandwidth
			// plugin's egress limit (an ingress qdisc on the pod's lxc
			// veth redirecting to an ifb) is not held, because Cilium's
			// tcx program on that veth redirects the pod's packets before
			// the qdisc's filter runs (the drain went at 2.9-3.8 Gbit/s
			// through a 10M limit). Held here as the finding, so a Cilium
			// that honours the annotation fails this and the docs get
			// updated (docs/kubernetes.md, "Cilium").
			switch {
			case ss >= 6e6 && ss <= 11e6:
				t.Errorf("%s %s on Cilium: steady state %.2f Mbit/s: the 10M egress limit now holds; update the finding", r.Labels["direction"], r.Labels["proto"], ss/1e6)
			case ss < 6e6:
				// Seen once (native, cross node, TCP): 14 Mbit/s in the
				// first 100 ms, then nothing; not a limit, a stall.
				t.Errorf("%s %s on Cilium: steady state %.2f Mbit/s: the flow stalled (neither the limit nor the offered rate)", r.Labels["direction"], r.Labels["proto"], ss/1e6)
			}
			continue
		}
		// Enforced: well below the unshaped path (Gbit/s) and near 10M.
		if ss < 6e6 || ss > 11e6 {
			t.Errorf("%s %s: steady state %.2f Mbit/s, want 6-11 under a 10M limit", r.Labels["direction"], r.Labels["proto"], ss/1e6)
		}
	}
}

// recreatePods deletes cnperf's pods (the server keeps its store on its
// volume) and waits until their replacements, on the CNI's new network,
// are ready.
func recreatePods(ctx context.Context, t *testing.T, kc *k8s.Client) {
	t.Helper()
	pods := kc.Kube.CoreV1().Pods(k8s.Namespace)
	old, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var oldUIDs []string
	for _, p := range old.Items {
		oldUIDs = append(oldUIDs, string(p.UID))
	}
	zero := int64(0)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{})
		left := 0
		if err == nil {
			for _, p := range list.Items {
				if slices.Contains(oldUIDs, string(p.UID)) {
					left++
				}
			}
		}
		if err == nil && left == 0 && len(list.Items) >= len(old.Items) && allReady(list.Items) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods not recreated and ready in 3m (old left %d, err %v)", left, err)
		}
		time.Sleep(time.Second)
	}
	if err := kc.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func allReady(pods []corev1.Pod) bool {
	for _, p := range pods {
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready || p.DeletionTimestamp != nil {
			return false
		}
	}
	return true
}

// compareRuns prints `cnperf compare` of two stored runs, read from the
// server in the cluster.
func compareRuns(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, ref, other string) string {
	t.Helper()
	return fromServer(ctx, t, kc, cnp, "compare", ref, other)
}
