package k8stest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
)

// policingFlow is the length of each of the thesis case's flows.
const policingFlow = 3 * time.Second

// runPolicing runs the thesis's failing case on the cluster: the CNI's
// ingress limit of 1 Mbit/s on a pod (kubernetes.io/ingress-bandwidth),
// UDP into it at the limit and then at 100 Mbit/s. It must end within its
// planned time (the flows' lengths) plus 30 s with a row
// giving the rate, the loss and the time to conform, and the police
// action's row must say why it was not used (this kernel lacks it).
func runPolicing(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	planned := 2 * policingFlow
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); watchStandIns(wctx, t, kc) }()
	defer func() { stopWatch(); <-watched }()
	t0 := time.Now()
	out, errOut, err := cnp(planned+5*time.Minute, "run", "policing", "--k8s", "--time", policingFlow.String(), "--repeat", "1",
		"--set", "ingress-bandwidth=1M", "--set", "placement=cross-node", "--cni-conf-dir", cniDir, "--json")
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("cnperf run policing --k8s after %v: %v\n%s\n%s", took.Round(time.Second), err, out, errOut)
	}
	var res struct {
		Rows    []row `json:"rows"`
		Shaping struct {
			Pod   string       `json:"pod"`
			Links []k8s.LinkTC `json:"links"`
		} `json:"shaping_qdiscs"`
		Drain   *row           `json:"shaping_drain"`
		Kernels []k8s.KernelTC `json:"node_kernels"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	t.Logf("progress:\n%s", errOut)
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	}()
	t.Logf("policing --k8s --set ingress-bandwidth=1M in %v (planned %v: two %v flows); qdiscs the CNI installed for %s:\n  %s",
		took.Round(100*time.Millisecond), planned, policingFlow, res.Shaping.Pod, strings.Join(k8s.DescribeQdiscs(res.Shaping.Links), "\n  "))
	if took > planned+30*time.Second {
		t.Errorf("took %v, want within the planned %v plus 30 s", took.Round(100*time.Millisecond), planned)
	}
	for _, k := range res.Kernels {
		t.Logf("node %s (kernel %s): police action: %v", k.Node, k.Kernel, map[bool]string{true: "present", false: k.Lacks()}[k.Lacks() == ""])
	}
	if res.Drain != nil {
		t.Logf("burst drain (one unthrottled TCP flow into the pod first): %.1f Mbit/s at the receiver", res.Drain.Median["throughput_bps.receiver"]/1e6)
	}
	checkCNILabels(t, res.Rows, want)
	var police, flood bool
	for _, r := range res.Rows {
		if msg := r.Labels["unsupported"]; msg != "" {
			police = true
			t.Logf("police variant: %s", msg)
			if !strings.Contains(msg, "police action") {
				t.Errorf("the police variant's row does not say why: %q", msg)
			}
			continue
		}
		conform := "never"
		if v, ok := r.Median["time_to_conform_s"]; ok {
			conform = (time.Duration(v * float64(time.Second))).String()
		}
		t.Logf("%s %s %s load %s: offered %.1f Mbit/s, steady state %.3f Mbit/s, first 100 ms %.2f Mbit/s, loss %.1f %%, conforms after %s",
			r.Labels["variant"], r.Labels["direction"], r.Labels["proto"], r.Labels["load"], r.Median["offered_bps"]/1e6,
			r.Median["steady_state_bps"]/1e6, r.Median["first_interval_bps"]/1e6, r.Median["loss_pct"], conform)
		if r.Labels["load"] != "flood" {
			continue
		}
		flood = true
		if r.Median["offered_bps"] != 100e6 {
			t.Errorf("flood offered %.0f bit/s, want 100M", r.Median["offered_bps"])
		}
		if ss := r.Median["steady_state_bps"]; ss < 0.5e6 || ss > 1.5e6 {
			t.Errorf("flood: steady state %.3f Mbit/s, want about the 1M limit", ss/1e6)
		}
		if _, ok := r.Median["loss_pct"]; !ok {
			t.Error("flood: no loss_pct")
		}
	}
	if !police || !flood {
		t.Errorf("want the police variant's row and the 100M flood's row; rows %+v", res.Rows)
	}
}

// runCapacity runs a short capacity search on the cross-node path: the
// highest UDP rate with loss below 0.1 %, coarse (30 %) to keep it short.
func runCapacity(t *testing.T, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	out, errOut, err := cnp(5*time.Minute, "run", "capacity", "--k8s", "--time", "1s", "--repeat", "1", "--set", "paths=cross-node",
		"--set", "start=200M", "--set", "max=800M", "--set", "precision=0.3", "--set", "trial-time=500ms", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run capacity --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows []row `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	if len(res.Rows) == 0 {
		t.Fatalf("no rows:\n%s", out)
	}
	checkCNILabels(t, res.Rows, want)
	for _, r := range res.Rows {
		t.Logf("capacity %s in %v: %v", r.Connection, time.Since(t0).Round(time.Second), r.Median)
	}
}

// watchStandIns logs the stand-in agent pods' container states while a
// suite runs (a restart or an OOM kill says why a flow found no responder).
func watchStandIns(ctx context.Context, t *testing.T, kc *k8s.Client) {
	seen := map[string]string{}
	for ctx.Err() == nil {
		pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=shaped"})
		if err == nil {
			for _, p := range pods.Items {
				for _, cs := range p.Status.ContainerStatuses {
					st := fmt.Sprintf("phase %s ready %v restarts %d", p.Status.Phase, cs.Ready, cs.RestartCount)
					if cs.LastTerminationState.Terminated != nil {
						lt := cs.LastTerminationState.Terminated
						st += fmt.Sprintf(", last exit %d %s: %s", lt.ExitCode, lt.Reason, lt.Message)
					}
					if seen[p.Name] != st {
						seen[p.Name] = st
						t.Logf("stand-in %s: %s", p.Name, st)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
