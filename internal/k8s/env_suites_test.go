package k8s

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestEverySuiteWorksOrIsRefusedOnKubernetes: `cnperf run SUITE --k8s`
// works for every registered suite or is refused before anything is made,
// naming the capability the cluster lacks. Each suite is planned against
// the cluster environment's Caps (as on a node whose kernel lacks the
// police action); a suite that plans is checked to ask only for what the
// cluster has, a refused one to be a *suite.LacksError naming each missing
// capability and its reason, with no run created and no change made (the
// Env has no client: a change would panic).
func TestEverySuiteWorksOrIsRefusedOnKubernetes(t *testing.T) {
	kernels := []KernelTC{{Node: "node1", Kernel: "6.18", Missing: map[string]string{"police": "unsupported: kernel lacks the police action (no such file or directory)"}}}
	// What each suite must do today, with both opt-in agent sets and with
	// the default install; a suite not listed must still work or be
	// refused as below.
	for _, tc := range []struct {
		name string
		env  *Env
		want map[string]string
	}{
		{"opt-in agent sets", &Env{kernels: kernels, Sets: AgentSets{Host: true, QoS: true}, CNI: CNI{Name: "calico", Version: "v3.31.0"}}, map[string]string{
			"baseline": "works", "capacity": "works", "shaping": "works", "policing": "works", "cni-qos": "works",
			// A cluster has one backend; without --backends naming it the suite
			// says so before anything is made.
			"cni-compare": "works",
			// The path itself is the cross-node bottleneck unless a FIFO
			// is asked for.
			"contention": "works",
		}},
		// Pod Security restricted: what needs an opt-in agent set is
		// refused naming the option.
		{"default install", &Env{}, map[string]string{
			"baseline": "works", "capacity": "works", "matrix": "works", "cni-compare": "works",
			"shaping": "deploy with --host-agents", "policing": "police action",
			"qos-priority": "deploy with --qos-agents", "contention": "works",
			"cni-qos": "CNI is not known",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { everySuiteOn(t, tc.env, tc.want) })
	}
}

func everySuiteOn(t *testing.T, env *Env, want map[string]string) {
	caps := env.Caps()
	reg := builtin.Registry()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			s, _ := reg.Get(name)
			fake := suitetest.NewFakeAPI()
			r := &suite.Runner{API: fake, Env: env, Poll: time.Millisecond}
			o := suite.Options{Time: time.Second, Repeat: 1, Backend: "vxlan"}
			_, phases, err := r.Plan(context.Background(), s, o)
			if err == nil {
				for _, ph := range phases {
					for _, c := range ph.Changes {
						if !caps.Has(c.What) {
							t.Errorf("phase %q asks for %s, which the cluster lacks", ph.Name, c.What)
						}
					}
				}
				if w := want[name]; w != "" && w != "works" {
					t.Errorf("planned, want a refusal naming %s", w)
				}
				return
			}
			if _, err := r.Run(context.Background(), s, o); err == nil || len(fake.Created) != 0 {
				t.Errorf("run: %v, %d runs created; want a refusal before anything is made", err, len(fake.Created))
			}
			if w := want[name]; w == "works" {
				t.Errorf("refused, want it to work: %v", err)
			}
			var le *suite.LacksError
			if !errors.As(err, &le) {
				// The suite itself refused, knowing the cluster's Caps (a
				// capability that needs an opt-in): it must say what.
				if why := want[name]; why == "" || !strings.Contains(err.Error(), why) {
					t.Errorf("refused without naming a capability: %v", err)
				}
				return
			}
			for i, c := range le.Missing {
				if caps.Has(c) || !strings.Contains(err.Error(), string(c)) || le.Why[i] == "" || !strings.Contains(err.Error(), le.Why[i]) {
					t.Errorf("refusal does not name %s and why: %v", c, err)
				}
			}
			if w := want[name]; w != "" && !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not name %q", err, w)
			}
		})
	}
	if !slices.Contains(reg.Names(), "policing") {
		t.Fatal("no policing suite registered")
	}
}

// TestPolicingOnAClusterIsTheCNIAndAnUnsupportedRow: on nodes whose kernel
// lacks the police action, `policing --k8s --set ingress-bandwidth=1M`
// plans the CNI's ingress limit (a change the cluster makes) and one row
// saying why the police action was not tried; on nodes that have it, the
// police variant is a row saying cnperf does not police a node's veth.
func TestPolicingOnAClusterIsTheCNIAndAnUnsupportedRow(t *testing.T) {
	s, _ := builtin.Registry().Get("policing")
	o := suite.Options{Time: 3 * time.Second, Repeat: 1, Set: map[string]string{"ingress-bandwidth": "1M", "placement": "cross-node"}}
	for _, c := range []struct {
		kernels []KernelTC
		why     string
	}{
		{[]KernelTC{{Node: "node1", Kernel: "6.18", Missing: map[string]string{"police": "unsupported: kernel lacks the police action (no such file or directory)"}}, {Node: "node2", Kernel: "6.18"}},
			"node node1 (kernel 6.18): unsupported: kernel lacks the police action"},
		{[]KernelTC{{Node: "node1", Err: "pod failed"}}, "node node1: could not try the police action: pod failed"},
		{[]KernelTC{{Node: "node1"}, {Node: "node2"}}, "not run: cnperf does not put the police action on a cluster node's veth yet (the kernels of node1, node2 have it)"},
	} {
		r := &suite.Runner{API: suitetest.NewFakeAPI(), Env: &Env{kernels: c.kernels, Sets: AgentSets{Host: true, QoS: true}}}
		_, phases, err := r.Plan(context.Background(), s, o)
		if err != nil {
			t.Fatalf("%v: %v", c.kernels, err)
		}
		if len(phases) != 2 || !strings.HasPrefix(phases[0].Steps[0].Labels["unsupported"], c.why) || len(phases[1].Changes) != 1 || phases[1].Changes[0].What != suite.CapPodShaping {
			t.Errorf("%v: phases %+v", c.kernels, phases)
		}
	}
}

// TestCniQoSOnCiliumWithoutFq: what the detect pods found reaches the
// suite's capabilities (the features tried, per node, with the kernel's
// reason; the CNI's name and release), and cni-qos on Cilium plans the
// bandwidth plugin's phase and notes the Bandwidth Manager and priority
// as not tried, naming the missing fq.
func TestCniQoSOnCiliumWithoutFq(t *testing.T) {
	noFq := "fq qdisc not supported by this kernel: Specified qdisc kind is unknown"
	env := &Env{Sets: AgentSets{Host: true, QoS: true}, CNI: CNI{Name: "cilium", Version: "v1.20.2", Mode: "native"},
		kernels: []KernelTC{{Node: "node1", Kernel: "6.18.44", Missing: map[string]string{"fq": noFq}}, {Node: "node2", Kernel: "6.18.44"}}}
	caps := env.Caps()
	if caps.CNI.Name != "cilium" || caps.CNI.Version != "v1.20.2" || caps.CNI.Kernel != "6.18.44" {
		t.Errorf("caps.CNI %+v", caps.CNI)
	}
	if why := caps.KernelTC["fq"]; !strings.Contains(why, "node1") || !strings.Contains(why, noFq) {
		t.Errorf("KernelTC[fq] = %q, want node1's reason", why)
	}
	if why, ok := caps.KernelTC["tbf"]; !ok || why != "" {
		t.Errorf("KernelTC[tbf] = %q, %v; want tried and present", why, ok)
	}
	s, _ := builtin.Registry().Get("cni-qos")
	r := &suite.Runner{API: suitetest.NewFakeAPI(), Env: env}
	_, phases, err := r.Plan(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	notes := map[string]string{}
	var tried []string
	for _, ph := range phases {
		for _, st := range ph.Steps {
			if w := st.Labels["why"]; w != "" {
				notes[st.Labels["feature"]] = w
			} else if len(ph.Changes) > 0 {
				tried = append(tried, st.Labels["feature"])
			}
		}
	}
	for _, f := range []string{"bandwidth-manager", "priority"} {
		if !strings.Contains(notes[f], "lacks fq") {
			t.Errorf("%s: %q, want not tried for want of fq", f, notes[f])
		}
	}
	if !slices.Contains(tried, "bandwidth-plugin") {
		t.Errorf("tried %v, want the bandwidth plugin", tried)
	}
}
