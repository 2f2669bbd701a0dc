// Package evaluate runs the study in one go: the questions a platform
// engineer asks of a container network (overlay cost, capacity, whether a
// DSCP mark survives and protects, whether bandwidth and ingress limits
// hold, how competing flows share, path MTU, latency under load, what
// NetworkPolicies cost, IPv6, SLOs), each answered by
// running an existing suite, and the verdict sheet: one line per question
// (and per placement or variant) with a verdict word, the figures behind it
// and the reason, or why it was not asked (a capability the environment
// lacks, an opt-in not given, the time budget).
//
// Verdicts come from the suites' own rows and verdict logic (qospriority,
// shaping, contention, capacity, responsiveness, netpol); this package only groups and words them.
// It never touches the network: it drives a Runner (suite.Runner on a lab,
// a cluster or any server).
package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/netpol"
	"github.com/cnperf/cnperf/internal/suite/responsiveness"
)

// The study's defaults when no --budget, --time or --repeat is given:
// every question fits DefaultBudget on a two-node cluster
// (TestDefaultEvaluatePlanFits in internal/k8s).
const (
	DefaultBudget = 15 * time.Minute
	DefaultTime   = 3 * time.Second // each timed measurement
	DefaultRepeat = 3               // repetitions of each measurement
)

// Verdict words.
const (
	Holds    = "holds"
	Fails    = "fails"
	Partial  = "partial"
	Measured = "measured" // a figure with no pass or fail (overlay cost, path MTU)
	Unknown  = "unknown"  // asked, but the rows cannot say
	NotAsked = "not asked"
)

// Question ids, in the order the sheet lists them.
const (
	QOverlay  = "overlay"
	QCapacity = "capacity"
	QDSCP     = "dscp"
	QPriority = "priority"
	QShaping  = "bandwidth"
	QIngress  = "ingress"
	QFairness = "fairness"
	QMTU      = "mtu"
	QLatency  = "latency"
	QPolicy   = "policy"
	QIPv6     = "ipv6"
	QSLO      = "slo"
)

// A Question is one line (or group of lines) of the sheet and the suite
// run that answers it. Questions sharing a suite and settings share one
// run.
type Question struct {
	ID, Title string
	// Suite answers the question with Set (on top of the evaluation's
	// own settings); "" for questions answered without a run of their
	// own (ipv6, slo).
	Suite string
	Set   map[string]string
	// OptIn questions are asked only when --questions names them (they
	// do not fit the default budget beside the others).
	OptIn bool
	// Judge turns the suite's rows into the question's lines.
	Judge func(rows []suite.Row) []Line
}

// Questions are the study's questions, in the sheet's order.
func Questions() []Question {
	return []Question{
		{ID: QOverlay, Title: "overlay overhead: pod vs node, same vs cross node, via Service", Suite: "baseline", Judge: judgeOverlay},
		{ID: QCapacity, Title: "capacity per path (highest UDP rate under 0.1 % loss)", Suite: "capacity",
			Set: map[string]string{"trial-time": "500ms"}, Judge: judgeCapacity},
		{ID: QDSCP, Title: "does a DSCP mark survive (at the receiver; outer and inner header on the wire)", Suite: "qos-priority",
			Set: qosSet, Judge: judgeDSCP},
		{ID: QPriority, Title: "does priority protect EF under congestion, per placement and variant", Suite: "qos-priority",
			Set: qosSet, Judge: judgePriority},
		{ID: QShaping, Title: "does a bandwidth annotation hold; overshoot and time to conform", Suite: "shaping",
			Set: map[string]string{"loads": "at,above", "protos": "tcp,udp"}, Judge: judgeLimits},
		{ID: QIngress, Title: "does ingress limiting hold, and at what loss", Suite: "policing",
			Set: map[string]string{"ingress-bandwidth": "10M", "loads": "at,above", "protos": "tcp,udp"}, Judge: judgeIngress},
		{ID: QFairness, Title: "do competing flows share fairly; do senders back off", Suite: "contention", Judge: judgeFairness},
		{ID: QMTU, Title: "path MTU per path and black holes (DF size sweep)", Suite: mtuSuite, Judge: judgeMTU},
		{ID: QLatency, Title: "latency under load: idle vs loaded round trip per path, RPM, where the queue was", Suite: responsiveness.SuiteName,
			Judge: judgeLatency},
		{ID: QPolicy, Title: "policy cost: 100 policies against none, deny and allow enforcement, established connections", Suite: netpol.SuiteName,
			Set: policySet, OptIn: true, Judge: judgePolicy},
		{ID: QIPv6, Title: "IPv6 paths where the network is dual-stack"},
		{ID: QSLO, Title: "the SLOs given (--slo FILE)"},
	}
}

// qosSet are qos-priority's settings for the study: the unmarked and EF
// foregrounds (the mark the questions name), each variant the
// environment shows by default.
var qosSet = map[string]string{"markings": "none,EF"}

// policySet are netpol's settings for the study: one count (100) of
// each variant, not the suite's 10, 100 and 1,000, so that the question
// takes about 5 minutes at the study's defaults.
var policySet = map[string]string{"counts": "100"}

// IDs returns the question ids in order.
func IDs() []string {
	var ids []string
	for _, q := range Questions() {
		ids = append(ids, q.ID)
	}
	return ids
}

// Line is one line of the verdict sheet.
type Line struct {
	Question string `json:"question"`
	// Scope tells the lines of one question apart: a connection,
	// placement, variant or objective.
	Scope   string `json:"scope,omitempty"`
	Verdict string `json:"verdict"`
	// Figures are the measured figures behind the verdict, as text.
	Figures string `json:"figures,omitempty"`
	Reason  string `json:"reason"`
	// Key is the line's headline figure, which compare sets side by side.
	Key *Figure `json:"key,omitempty"`
}

// Figure is one headline figure of a line.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

// Plan is what the study runs for one question: the estimate, and whether
// it fits.
type Plan struct {
	Question string        `json:"question"`
	Suite    string        `json:"suite,omitempty"`
	Estimate time.Duration `json:"estimate_ns,omitempty"`
	Asked    bool          `json:"asked"`
	// Reason says why a question is not asked.
	Reason string `json:"reason,omitempty"`
	// Took is how long its run took (0: not run, or run for an earlier
	// question sharing it).
	Took time.Duration `json:"took_ns,omitempty"`
}

// Sheet is the study's outcome: the plan and a line per question.
type Sheet struct {
	Budget time.Duration `json:"budget_ns"`
	Took   time.Duration `json:"took_ns"`
	Plans  []Plan        `json:"plan"`
	Lines  []Line        `json:"lines"`
	// Checks are the SLO evaluations behind the slo lines.
	Checks []suite.Check `json:"slo,omitempty"`
}

// Runner plans and runs suites (*suite.Runner).
type Runner interface {
	Plan(ctx context.Context, s suite.Suite, o suite.Options) ([]suite.Endpoint, []suite.Phase, error)
	Run(ctx context.Context, s suite.Suite, o suite.Options) (suite.Report, error)
}

// Config is one evaluation.
type Config struct {
	// Budget bounds the study's measurements (DefaultBudget when 0).
	Budget time.Duration
	// Options are every suite's time, repetitions, backend and the
	// environment's settings (allow-node-qdisc); Set is merged under each
	// question's own settings.
	Options suite.Options
	// Only, when set, names the questions to ask; the others are not
	// asked ("not chosen").
	Only []string
	// Objectives are the --slo file's, evaluated on every row (none: the
	// slo question is not asked).
	Objectives []suite.Objective
	// Progress gets the plan before anything runs and each question as it
	// starts (nil: none).
	Progress io.Writer
}

// Result is the sheet with the suites' reports behind it, in run order.
type Result struct {
	Sheet   Sheet
	Reports []suite.Report
}

// runKey names a suite run shared by questions.
func runKey(q Question) string {
	keys := slices.Sorted(maps.Keys(q.Set))
	var b strings.Builder
	b.WriteString(q.Suite)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, q.Set[k])
	}
	return b.String()
}

// options are the suite options of q's run.
func (c Config) options(q Question) suite.Options {
	o := c.Options
	o.Set = maps.Clone(c.Options.Set)
	if o.Set == nil {
		o.Set = map[string]string{}
	}
	maps.Copy(o.Set, q.Set)
	return o
}

// Evaluate plans every question (which fit the budget, which are not
// asked and why), says so on cfg.Progress, runs the questions' suites in
// order and returns the sheet. A suite that fails leaves its questions
// unknown with the error; Evaluate fails only when ctx ends.
func Evaluate(ctx context.Context, r Runner, reg *suite.Registry, cfg Config) (*Result, error) {
	budget := cfg.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	if err := checkOnly(cfg.Only); err != nil {
		return nil, err
	}
	start := time.Now()
	res := &Result{Sheet: Sheet{Budget: budget}}
	qs := Questions()
	plans := make([]Plan, len(qs))
	estimates := map[string]time.Duration{}
	planned := map[string]error{}
	var agents []suite.Endpoint
	used := time.Duration(0)
	for i, q := range qs {
		p := Plan{Question: q.ID, Suite: q.Suite}
		switch {
		case len(cfg.Only) > 0 && !slices.Contains(cfg.Only, q.ID):
			p.Reason = "not chosen (--questions)"
		case q.ID == QSLO && len(cfg.Objectives) == 0:
			p.Reason = "opt-in not given: --slo FILE"
		case q.Suite == "":
			p.Asked = true
		default:
			s, err := reg.Get(q.Suite)
			if err != nil {
				p.Reason = fmt.Sprintf("no suite answers it here: %v", err)
				break
			}
			k := runKey(q)
			perr, seen := planned[k]
			if !seen {
				eps, phases, err := r.Plan(ctx, s, cfg.options(q))
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if len(eps) > 0 {
					agents = eps
				}
				perr = err
				planned[k] = err
				if err == nil {
					_, follows := s.(suite.Follower)
					estimates[k] = Estimate(phases, follows)
				}
			}
			p.Estimate = estimates[k]
			switch {
			case perr != nil:
				p.Reason = refusal(perr)
			case q.OptIn && !slices.Contains(cfg.Only, q.ID):
				p.Reason = fmt.Sprintf("opt-in not given: --questions %s (about %s; beside the others it does not fit the default budget)", q.ID, round(p.Estimate))
			case seen && estimates[k] > 0 && sharedAsked(plans[:i], qs[:i], k):
				p.Asked = true // its run is already counted
			case used+p.Estimate > budget:
				p.Reason = fmt.Sprintf("budget: needs about %s, %s of %s left", round(p.Estimate), round(budget-used), round(budget))
			default:
				p.Asked = true
				used += p.Estimate
			}
		}
		plans[i] = p
	}
	sayPlan(cfg.Progress, qs, plans, budget, used)

	rowsOf := map[string][]suite.Row{}
	errOf := map[string]error{}
	var all []suite.Row
	for i, q := range qs {
		p := &plans[i]
		if !p.Asked || q.Suite == "" {
			continue
		}
		k := runKey(q)
		if _, done := rowsOf[k]; done || errOf[k] != nil {
			continue
		}
		if left := budget - time.Since(start); p.Estimate > left {
			p.Asked = false
			p.Reason = fmt.Sprintf("budget: needs about %s, %s left after the questions before it", round(p.Estimate), round(max(left, 0)))
			continue
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "evaluate: %s (%s, about %s)\n", q.ID, q.Suite, round(p.Estimate))
		}
		s, _ := reg.Get(q.Suite)
		t0 := time.Now()
		rep, err := r.Run(ctx, s, cfg.options(q))
		p.Took = time.Since(t0)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			errOf[k] = err
			if len(rep.Runs) > 0 {
				res.Reports = append(res.Reports, rep)
			}
			continue
		}
		// The overheads against node-node, as every report sets them.
		suite.SetOverhead(rep.Rows)
		res.Reports = append(res.Reports, rep)
		rowsOf[k] = rep.Rows
		all = append(all, rep.Rows...)
	}

	for i, q := range qs {
		p := plans[i]
		k := runKey(q)
		switch {
		case !p.Asked:
			res.Sheet.Lines = append(res.Sheet.Lines, Line{Question: q.ID, Verdict: NotAsked, Reason: p.Reason})
		case q.ID == QIPv6:
			res.Sheet.Lines = append(res.Sheet.Lines, judgeIPv6(agents))
		case q.ID == QSLO:
			checks := suite.Evaluate(cfg.Objectives, all)
			res.Sheet.Checks = checks
			res.Sheet.Lines = append(res.Sheet.Lines, judgeSLO(checks)...)
		case errOf[k] != nil:
			res.Sheet.Lines = append(res.Sheet.Lines, Line{Question: q.ID, Verdict: Unknown, Reason: "the run failed: " + errOf[k].Error()})
		default:
			lines := q.Judge(rowsOf[k])
			if len(lines) == 0 {
				lines = []Line{{Verdict: Unknown, Reason: "the run gave no rows this question reads"}}
			}
			for _, l := range lines {
				l.Question = q.ID
				res.Sheet.Lines = append(res.Sheet.Lines, l)
			}
		}
	}
	res.Sheet.Plans = plans
	res.Sheet.Took = time.Since(start)
	return res, nil
}

// sharedAsked reports whether an earlier question with run k is asked.
func sharedAsked(plans []Plan, qs []Question, k string) bool {
	for i := range plans {
		if plans[i].Asked && runKey(qs[i]) == k {
			return true
		}
	}
	return false
}

func checkOnly(only []string) error {
	ids := IDs()
	for _, id := range only {
		if !slices.Contains(ids, id) {
			return fmt.Errorf("unknown question %q (known: %s)", id, strings.Join(ids, ", "))
		}
	}
	return nil
}

// refusal says why a suite could not be planned: a capability the
// environment lacks, or what else stopped it.
func refusal(err error) string {
	if errors.Is(err, suite.ErrEnvLacks) {
		return "capability lacking: " + err.Error()
	}
	return "cannot plan: " + err.Error()
}

// Per-step and per-phase costs beyond the measured time (scheduling,
// connection set-up, result delivery), and the rounds a searching suite
// (capacity) is expected to need per first round.
const (
	stepOverhead   = 500 * time.Millisecond
	phaseOverhead  = 2 * time.Second
	followerRounds = 14
	pingInterval   = time.Second // ping's default interval (probe/icmp)
)

// Estimate is how long phases take: per phase its overhead and its steps
// one after another (a Concurrent phase: its longest step); a searching
// suite's first round times followerRounds.
func Estimate(phases []suite.Phase, follows bool) time.Duration {
	var d time.Duration
	for _, ph := range phases {
		var sum, longest time.Duration
		for _, st := range ph.Steps {
			t := stepTime(st)
			sum += t
			longest = max(longest, t)
		}
		if ph.Concurrent {
			sum = longest
		}
		d += phaseOverhead + sum
	}
	if follows {
		d *= followerRounds
	}
	return d
}

func stepTime(st suite.Step) time.Duration {
	t := st.Spec.Duration.D() + st.Spec.StartDelay.D()
	if t == 0 && st.Spec.Count > 0 {
		iv := st.Spec.Interval.D()
		if iv == 0 {
			iv = pingInterval
		}
		t = time.Duration(st.Spec.Count) * iv
	}
	return t + stepOverhead
}

func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(10 * time.Second)
	}
	return d.Round(time.Second)
}

// sayPlan prints which questions fit the budget and which are left out.
func sayPlan(w io.Writer, qs []Question, plans []Plan, budget, used time.Duration) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "evaluate: budget %s, the questions asked take about %s\n", round(budget), round(used))
	for i, p := range plans {
		est := "-"
		if p.Estimate > 0 {
			est = round(p.Estimate).String()
		}
		if p.Asked {
			fmt.Fprintf(w, "  ask   %-9s %-8s %s\n", p.Question, est, qs[i].Title)
		} else {
			fmt.Fprintf(w, "  skip  %-9s %-8s %s\n", p.Question, est, p.Reason)
		}
	}
}

// judgeIPv6 says whether the agents registered IPv6 addresses: the paths
// the sheet measured are IPv6 ones only where they did.
func judgeIPv6(agents []suite.Endpoint) Line {
	var v4, v6 int
	for _, a := range agents {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			if ip.Is4() || ip.Is4In6() {
				v4++
			} else {
				v6++
			}
		}
	}
	switch {
	case v6 == 0:
		return Line{Question: QIPv6, Verdict: NotAsked,
			Reason: fmt.Sprintf("capability lacking: every agent registered an IPv4 address (%d agents); the network is not dual-stack here, so there is no IPv6 path to measure", v4)}
	case v4 == 0:
		return Line{Question: QIPv6, Verdict: Measured, Figures: fmt.Sprintf("%d agents on IPv6", v6),
			Reason: "the agents registered IPv6 addresses: the lines above measure IPv6 paths"}
	}
	return Line{Question: QIPv6, Verdict: Partial, Figures: fmt.Sprintf("%d agents on IPv4, %d on IPv6", v4, v6),
		Reason: "the agents registered both families: the lines above mix IPv4 and IPv6 paths"}
}

// judgeSLO is a line per SLO check.
func judgeSLO(checks []suite.Check) []Line {
	var out []Line
	for _, c := range checks {
		l := Line{Question: QSLO, Scope: c.Objective.Expr, Verdict: Fails, Reason: c.Line()}
		if c.Pass {
			l.Verdict = Holds
		}
		if c.Connection != "" {
			l.Scope += " · " + c.Connection
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		out = append(out, Line{Question: QSLO, Verdict: Unknown, Reason: "no objective applied to any row"})
	}
	return out
}

// Judge answers from one suite's rows every question that suite answers
// (a stored run compared beside bundles), with Question set on each line.
func Judge(suiteName string, rows []suite.Row) []Line {
	var out []Line
	for _, q := range Questions() {
		if q.Suite == "" || q.Suite != suiteName {
			continue
		}
		for _, l := range q.Judge(rows) {
			l.Question = q.ID
			out = append(out, l)
		}
	}
	return out
}
