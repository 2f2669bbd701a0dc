// Package netpol is the suite of what NetworkPolicies cost: between the
// cross-node pod pair, TCP throughput, TCP request/response and
// connect-request-response (crr) rates with no policy and with 10, 100
// and 1,000 policies, once with every policy selecting the destination
// pod (each allowing the source) and once with none selecting it (they
// select and allow only addresses of no pod of the run); each row
// against the no-policy figure; whether a deny made mid-run cuts an
// established connection; and the enforcement latency: from asking for a
// deny (then an allow) to the first connect it changes, sampled every
// 5 ms, and from asking to remove the deny to a connection allowed again.
// It runs where the environment enforces
// NetworkPolicy (suite.CapNetworkPolicy: the lab's policy controller; a
// cluster whose CNI enforces them); elsewhere it is refused with the
// environment's reason (Flannel enforces none).
package netpol

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "netpol"

// Measures of the steps.
const (
	MeasureTCP = "tcp"
	MeasureRR  = "rr"
	MeasureCRR = "crr"
	// MeasureHeld is a TCP rr connection made before a deny and kept
	// transacting through it; MeasureNew a crr started after it.
	MeasureHeld = "held"
	MeasureNew  = "new"
	// MeasureEnforce is a connect sampler running through a deny and
	// then an allow.
	MeasureEnforce = "enforce"
)

// PoliciesDeny labels the deny phase's steps and row; PoliciesEnforce the
// enforcement phases' and row.
const (
	PoliciesDeny    = "deny"
	PoliciesEnforce = "enforce"
)

// The deny phase's timeline: the deny is made denyAfter the run is
// created; the held connection transacts for heldFor from its start
// (agents start their tasks within a few seconds), the new connections
// start newAfter their task's start, after the deny.
const (
	denyAfter = 5 * time.Second
	heldFor   = 10 * time.Second
	newAfter  = 7 * time.Second
	newFor    = 2 * time.Second
)

// An enforcement phase's timeline: a connect every enforceEvery (each
// bounded by enforceTimeout) for enforceFor, a deny made enforceDeny after
// the run is created, an allow enforceAllow after it.
const (
	enforceFor     = 12 * time.Second
	enforceEvery   = 5 * time.Millisecond
	enforceTimeout = 500 * time.Millisecond
	enforceDeny    = 5 * time.Second
	enforceAllow   = 8 * time.Second
)

// Labels of the steps and rows.
const (
	LabelPolicies = "policies" // the number of policies
	LabelSelect   = "select"   // SelectPair or SelectOther ("" with none)
)

// Values of LabelSelect.
const (
	SelectPair  = "pair"
	SelectOther = "other"
	SelectNone  = "none"
)

// Options tune the suite.
type Options struct {
	Time   time.Duration
	Repeat int
	// Counts are the numbers of policies measured besides none (default
	// 10, 100, 1000).
	Counts []int
	// Selects are the variants per count (default pair, other).
	Selects []string
	// Enforce is the number of enforcement phases per repetition (default
	// 3; 0 measures no enforcement latency).
	Enforce int
}

// maxEnforce bounds Options.Enforce.
const maxEnforce = 20

func defaults() Options {
	return Options{Counts: []int{10, 100, 1000}, Selects: []string{SelectPair, SelectOther}, Enforce: 3}
}

// Suite is the netpol suite.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "what NetworkPolicies cost: TCP throughput, rr and crr rates with 0, 10, 100 and 1,000 policies, against none; whether a deny cuts established connections; how long a deny and an allow take to be enforced"
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// MayUse implements suite.CapUser.
func (Suite) MayUse() []suite.Cap { return []suite.Cap{suite.CapNetworkPolicy} }

// OptionsFrom reads the common options and the settings.
func OptionsFrom(o suite.Options) (Options, error) {
	c := defaults()
	if err := o.Validate(); err != nil {
		return c, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	c.Time, c.Repeat = o.Time, o.Repeat
	return c, Settings(&c).Apply(SuiteName, o)
}

// Settings is the table of the suite's settings, reading into c.
func Settings(c *Options) suite.Settings {
	return suite.Settings{
		{Key: suite.Key{Name: "counts", Unit: fmt.Sprintf("list of counts (1-%d)", suite.MaxPolicies), Default: "10,100,1000",
			Meaning: "the numbers of policies measured, each against none"},
			Set: func(v string) error {
				c.Counts = nil
				for _, f := range suite.SplitList(v) {
					n, err := strconv.Atoi(f)
					if err != nil || n < 1 || n > suite.MaxPolicies {
						return fmt.Errorf("count %q: want 1-%d", f, suite.MaxPolicies)
					}
					if slices.Contains(c.Counts, n) {
						return fmt.Errorf("count %d given twice", n)
					}
					c.Counts = append(c.Counts, n)
				}
				return nil
			}},
		{Key: suite.Key{Name: "select", Unit: "list of pair, other", Default: "pair,other",
			Meaning: "policies that select the measured pod (allowing its peer), or that select no pod of the run"},
			Set: func(v string) error {
				c.Selects = nil
				for _, f := range suite.SplitList(v) {
					if f != SelectPair && f != SelectOther {
						return fmt.Errorf("select %q: want pair or other", f)
					}
					c.Selects = append(c.Selects, f)
				}
				return nil
			}},
		{Key: suite.Key{Name: "enforce", Unit: fmt.Sprintf("count (0-%d)", maxEnforce), Default: "3",
			Meaning: "enforcement latency samples per repetition: a deny then an allow made under a connect every 5 ms"},
			Set: func(v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > maxEnforce {
					return fmt.Errorf("enforce %q: want 0-%d", v, maxEnforce)
				}
				c.Enforce = n
				return nil
			}},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }

// Plan implements suite.Suite: per repetition a phase with no policy,
// the deny phase, one per count and variant, each measuring TCP
// throughput, rr and crr between the cross-node pair one after another,
// then the enforcement phases.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	c, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	if !caps.Has(suite.CapNetworkPolicy) {
		return nil, caps.Lacks(s.Name(), suite.CapNetworkPolicy)
	}
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	p, ok := pairs[suite.PodPodCrossNode]
	if !ok {
		return nil, errors.New("suite netpol: needs pods on two nodes (policies apply where traffic enters the destination's node)")
	}
	_, portText, err := net.SplitHostPort(p.Dst.ResponderAddr)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 1 {
		return nil, fmt.Errorf("suite %s: agent %s has no responder port (%q)", s.Name(), p.Dst.Name, p.Dst.ResponderAddr)
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		phases = append(phases, phase(c, p, rep, o.Backend, 0, SelectNone, port), denyPhase(p, rep, o.Backend, port))
		for _, n := range c.Counts {
			for _, sel := range c.Selects {
				phases = append(phases, phase(c, p, rep, o.Backend, n, sel, port))
			}
		}
		for i := range c.Enforce {
			phases = append(phases, enforcePhase(p, rep, i, o.Backend, port))
		}
	}
	return phases, nil
}

// phase measures the pair with n policies of variant sel.
func phase(c Options, p suite.Pair, rep int, backend string, n int, sel string, port int) suite.Phase {
	labels := map[string]string{LabelPolicies: strconv.Itoa(n), LabelSelect: sel}
	d := probe.Duration(c.Time)
	specs := map[string]probe.Spec{
		MeasureTCP: {Kind: probe.KindTCP, Target: p.Dst.ResponderAddr, Duration: d},
		MeasureRR:  {Kind: probe.KindRR, Target: p.Dst.ResponderAddr, Proto: "tcp", Duration: d},
		MeasureCRR: {Kind: probe.KindRR, Target: p.Dst.ResponderAddr, Proto: "crr", Duration: d},
	}
	ph := suite.Phase{Name: fmt.Sprintf("%s %d policies (%s), #%d", SuiteName, n, sel, rep+1)}
	for _, m := range []string{MeasureTCP, MeasureRR, MeasureCRR} {
		ph.Steps = append(ph.Steps, suite.Step{Connection: suite.PodPodCrossNode, Backend: backend, Measure: m, Repeat: rep,
			Src: p.Src, Dst: p.Dst, Spec: specs[m], Exclusive: true, Labels: labels})
	}
	if n > 0 {
		ps := &suite.PolicySet{Count: n}
		if sel == SelectPair {
			ps.Selecting, ps.From, ps.Port = n, p.Src.Name, port
		}
		ph.Changes = []suite.Change{{What: suite.CapNetworkPolicy, Member: p.Dst.Name, Policy: ps}}
	}
	return ph
}

// denyPhase asks whether a deny made mid-test cuts an established
// connection: a TCP rr connection transacts every 10 ms from before the
// deny to after it, and crr connections try after it (they should be
// refused). A policy that selects no pod is made first, so the
// environment tracks connections from the start, as a CNI's datapath
// does; it names the pair, so the environment prepares it (a cluster
// labels the pods) before the run rather than at the deny.
func denyPhase(p suite.Pair, rep int, backend string, port int) suite.Phase {
	labels := map[string]string{LabelPolicies: PoliciesDeny, LabelSelect: SelectPair}
	held := probe.Spec{Kind: probe.KindRR, Target: p.Dst.ResponderAddr, Proto: "tcp", Duration: probe.Duration(heldFor),
		Interval: probe.Duration(10 * time.Millisecond), Timeout: probe.Duration(2 * time.Second)}
	fresh := probe.Spec{Kind: probe.KindRR, Target: p.Dst.ResponderAddr, Proto: "crr", Duration: probe.Duration(newFor),
		StartDelay: probe.Duration(newAfter), Timeout: probe.Duration(2 * time.Second)}
	step := func(m string, sp probe.Spec) suite.Step {
		return suite.Step{Connection: suite.PodPodCrossNode, Backend: backend, Measure: m, Repeat: rep, Src: p.Src, Dst: p.Dst,
			Spec: sp, Labels: labels}
	}
	return suite.Phase{Name: fmt.Sprintf("%s deny mid-test, #%d", SuiteName, rep+1),
		Steps: []suite.Step{step(MeasureHeld, held), step(MeasureNew, fresh)},
		Changes: []suite.Change{
			{What: suite.CapNetworkPolicy, Member: p.Dst.Name, Policy: &suite.PolicySet{Count: 1, From: p.Src.Name, Port: port}},
			{What: suite.CapNetworkPolicy, Member: p.Dst.Name, Policy: &suite.PolicySet{Count: 1, Deny: true, From: p.Src.Name, Port: port}, After: denyAfter},
		}}
}

// enforcePhase measures how long a deny, then an allow, takes to change
// new connections: a connect sampler runs through both; the Runner tells
// the rows when each was asked for (suite.Outcome.Made), and when the
// deny's removal after the run was asked for and in effect (the
// environment's undo returns once the pair connects again).
func enforcePhase(p suite.Pair, rep, i int, backend string, port int) suite.Phase {
	labels := map[string]string{LabelPolicies: PoliciesEnforce, LabelSelect: SelectPair}
	spec := probe.Spec{Kind: probe.KindConnect, Target: p.Dst.ResponderAddr, Duration: probe.Duration(enforceFor),
		Interval: probe.Duration(enforceEvery), Timeout: probe.Duration(enforceTimeout)}
	return suite.Phase{Name: fmt.Sprintf("%s enforcement %d, #%d", SuiteName, i+1, rep+1),
		Steps: []suite.Step{{Connection: suite.PodPodCrossNode, Backend: backend, Measure: MeasureEnforce, Repeat: rep,
			Src: p.Src, Dst: p.Dst, Spec: spec, Labels: labels}},
		Changes: []suite.Change{
			{What: suite.CapNetworkPolicy, Member: p.Dst.Name, Policy: &suite.PolicySet{Deny: true, From: p.Src.Name, Port: port}, After: enforceDeny},
			{What: suite.CapNetworkPolicy, Member: p.Dst.Name, After: enforceAllow,
				Policy: &suite.PolicySet{Count: 1, Selecting: 1, From: p.Src.Name, Port: port}},
		}}
}
