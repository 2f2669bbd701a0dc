package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// twoNodeCluster is the server of a two-node cluster's default deploy
// (two pod agents per node, the base's cnperf-agent and cnperf-agent-b),
// with a host-network agent per node when host is set. It plans only:
// creating a run fails.
type twoNodeCluster struct{ host bool }

func (c twoNodeCluster) Agents(context.Context, bool) ([]api.Agent, error) {
	var out []api.Agent
	for n := 1; n <= 2; n++ {
		node := fmt.Sprintf("node%d", n)
		for p, comp := range []string{"a", "b"} {
			ip := fmt.Sprintf("10.244.%d.%d", n, p+2)
			out = append(out, api.Agent{PodUID: node + "-" + comp, PodName: "cnperf-agent-" + comp + "-" + node, NodeName: node,
				PodIP: ip, ResponderAddr: ip + ":5201", Status: "free"})
		}
		if c.host {
			ip := fmt.Sprintf("10.250.0.%d", n)
			out = append(out, api.Agent{PodUID: node + "-host", PodName: "cnperf-agent-host-" + node, NodeName: node,
				PodIP: ip, ResponderAddr: ip + ":5201", HostNetwork: true, Status: "free"})
		}
	}
	return out, nil
}

var errPlanOnly = errors.New("this test plans only")

func (twoNodeCluster) CreateRun(context.Context, api.RunCreate) (api.Run, error) {
	return api.Run{}, errPlanOnly
}
func (twoNodeCluster) GetRun(context.Context, string) (api.Run, error) { return api.Run{}, errPlanOnly }
func (twoNodeCluster) CancelRun(context.Context, string, string) (api.Run, error) {
	return api.Run{}, errPlanOnly
}

// planOnly plans with the suites' own plans and records when the first
// run is asked for, without running it.
type planOnly struct {
	*suite.Runner
	progress *bytes.Buffer
	atRun    string // the progress written before the first run
}

func (p *planOnly) Run(_ context.Context, s suite.Suite, _ suite.Options) (suite.Report, error) {
	if p.atRun == "" {
		p.atRun = p.progress.String()
	}
	return suite.Report{Suite: s.Name()}, errPlanOnly
}

// TestDefaultEvaluatePlanFits: `cnperf evaluate --k8s` with no --budget,
// --time or --repeat on a two-node cluster says up front, before any
// suite runs, the budget and, per question, whether it is asked (with its
// estimate) or left out and why; and every question the cluster can
// answer fits the default budget, on the default install and on the
// opt-in agent sets. Estimates come from the suites' own plans for the
// cluster's agents (evaluate.Estimate).
func TestDefaultEvaluatePlanFits(t *testing.T) {
	kernels := []KernelTC{{Node: "node1", Kernel: "6.18", Missing: map[string]string{"police": "unsupported: kernel lacks the police action"}}}
	for _, tc := range []struct {
		name string
		host bool
		env  *Env
	}{
		{"default install", false, &Env{kernels: kernels, CNI: CNI{Name: "flannel", Mode: "vxlan"}, PathMTU: 1450, Encap: suite.EncapVXLAN}},
		{"host and qos agents", true, &Env{kernels: kernels, Sets: AgentSets{Host: true, QoS: true},
			CNI: CNI{Name: "flannel", Mode: "vxlan"}, PathMTU: 1450, Encap: suite.EncapVXLAN}},
		{"policy-enforcing CNI", true, &Env{kernels: kernels, Sets: AgentSets{Host: true, QoS: true},
			CNI: CNI{Name: "calico", Mode: "vxlan"}, PathMTU: 1450, Encap: suite.EncapVXLAN}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var progress bytes.Buffer
			r := &planOnly{Runner: &suite.Runner{API: twoNodeCluster{host: tc.host}, Env: tc.env}, progress: &progress}
			res, err := evaluate.Evaluate(context.Background(), r, builtin.Registry(), evaluate.Config{Progress: &progress,
				Options: suite.Options{Time: evaluate.DefaultTime, Repeat: evaluate.DefaultRepeat}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the plan:\n%s", r.atRun)
			if r.atRun == "" {
				t.Fatal("no suite was asked to run")
			}
			if want := "evaluate: budget " + evaluate.DefaultBudget.String(); !strings.HasPrefix(r.atRun, want) {
				t.Errorf("the plan does not open with %q:\n%s", want, r.atRun)
			}
			var used time.Duration
			asked := 0
			for _, p := range res.Sheet.Plans {
				line := fmt.Sprintf("  skip  %-9s", p.Question)
				if p.Asked {
					line = fmt.Sprintf("  ask   %-9s", p.Question)
				}
				if !strings.Contains(r.atRun, line) {
					t.Errorf("question %s (asked %v, %s) not stated before the runs", p.Question, p.Asked, p.Reason)
				}
				if strings.HasPrefix(p.Reason, "budget") {
					t.Errorf("question %s left out by the default budget: %s", p.Question, p.Reason)
				}
				// The policy question is planned where the CNI enforces
				// NetworkPolicy, and opt-in: it does not fit beside the others.
				if p.Question == evaluate.QPolicy && tc.env.CNI.Name == "calico" &&
					(p.Asked || p.Estimate == 0 || !strings.HasPrefix(p.Reason, "opt-in not given: --questions policy")) {
					t.Errorf("policy on calico: asked %v, estimate %v, reason %q; want planned and opt-in", p.Asked, p.Estimate, p.Reason)
				}
				if p.Asked && p.Estimate > 0 {
					asked++
					used += p.Estimate
				}
			}
			if asked == 0 || used > evaluate.DefaultBudget {
				t.Errorf("%d questions asked, estimated %v against the budget %v", asked, used, evaluate.DefaultBudget)
			}
		})
	}
}
