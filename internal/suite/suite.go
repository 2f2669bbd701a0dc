package suite

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A Suite is one experiment cnperf runs between agents: baseline,
// cni-compare, qos-priority, shaping, policing, capacity. The Runner drives
// it through the server's API; the suite itself only plans and aggregates,
// so it can be tested without a network.
//
// The Runner calls Plan once, with the agents online at that moment. Plan
// returns the suite's phases in order; each phase becomes one run on the
// server (api.RunCreate with Suite = Name() and Params holding the phase's
// steps), and phases run one after another, never overlapping. Every step of
// a phase becomes one task (see Step.Task): from Src.ID to Dst.ID, with the
// step's Spec; the Spec's Target is only informative, the server fills it
// from the destination agent.
//
// After the last phase the Runner calls Rows with the outcomes of every step
// of every phase, in plan order. Rows must depend only on the outcomes (each
// carries its Step), never on state kept in the Suite between Plan and Rows:
// the same Rows call rebuilds the table later from the stored runs
// (RowsFromRuns), for `cnperf report RUN_ID`, in a different process.
//
// A suite that needs the network changed (a qdisc on a node's uplink, a
// shaper on a pod's veth) says so as data, in its phases' Changes; the
// environment under the run (Env: the lab, a cluster) makes them. The
// Runner refuses the suite before it creates anything when the
// environment lacks a capability a change uses, and names it.
//
// A suite is stateless and safe to reuse; register it explicitly in a
// Registry (no init-time registration).
type Suite interface {
	// Name is the suite's name as users type it ("baseline"). It is stored
	// as the runs' suite and selects the suite again when rows are rebuilt.
	Name() string
	// Describe says in one line what the suite measures, for help texts.
	Describe() string
	// Plan expands the suite for the given agents (only those online) into
	// phases, knowing what the environment can change (caps). Plan must not
	// touch the network or the server; bad options or too few agents are
	// errors naming the problem.
	Plan(agents []Endpoint, o Options, caps Caps) ([]Phase, error)
	// Rows aggregates the outcomes of all phases into the suite's rows.
	Rows(outcomes []Outcome) []Row
}

// A BackendComparer is a suite that measures one network backend per run
// and compares backends side by side: an environment that builds the
// network (the lab) runs it once per backend on a fresh network each, and
// its output adds the comparison of the backends.
type BackendComparer interface {
	ComparesBackends() bool
}

// ComparesBackends reports whether s is a BackendComparer that says so.
func ComparesBackends(s Suite) bool {
	c, ok := s.(BackendComparer)
	return ok && c.ComparesBackends()
}

// Options are the settings every suite takes from the command line. A
// suite ignores what it has no use for and rejects values it cannot honour.
type Options struct {
	// Time is the length of each timed measurement (default 5 s).
	Time time.Duration `json:"time"`
	// Repeat is how often each measurement runs (default 3); rows show the
	// median with the minimum and maximum.
	Repeat int `json:"repeat"`
	// Backend labels the rows with the network backend under test
	// ("host-gw", "vxlan"; "" when unknown).
	Backend string `json:"backend,omitempty"`
	// Set holds suite-specific settings given as --set KEY=VALUE; a suite
	// rejects keys it does not know (see CheckSet).
	Set map[string]string `json:"set,omitempty"`
}

// DefaultOptions returns the defaults: 5 s per measurement, 3 repetitions.
func DefaultOptions() Options { return Options{Time: 5 * time.Second, Repeat: 3} }

// Validate checks the common options.
func (o Options) Validate() error {
	var errs []error
	if o.Time <= 0 || o.Time > time.Hour {
		errs = append(errs, fmt.Errorf("time %v: want more than 0 and at most 1h", o.Time))
	}
	if o.Repeat < 1 || o.Repeat > 100 {
		errs = append(errs, fmt.Errorf("repeat %d: want 1-100", o.Repeat))
	}
	return errors.Join(errs...)
}

// SetAllowNodeQdisc is the setting (--set allow-node-qdisc=true) that lets
// an environment whose nodes are not its own (a Kubernetes cluster) put a
// qdisc on a node's interface (suite.CapNodeQdisc); without it such a
// change is refused before anything is made, saying what it would change.
const SetAllowNodeQdisc = "allow-node-qdisc"

// EnvSettings are the settings the environment reads, not the suite:
// every suite accepts them.
var EnvSettings = []string{SetAllowNodeQdisc}

// AllowNodeQdisc reads the allow-node-qdisc setting (false when absent).
func (o Options) AllowNodeQdisc() (bool, error) {
	v, ok := o.Set[SetAllowNodeQdisc]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", SetAllowNodeQdisc, v)
	}
	return b, nil
}

// CheckSet rejects keys of o.Set that are not in known (or in
// EnvSettings), naming them and the keys the suite accepts, and values of
// the environment's settings that do not parse.
func (o Options) CheckSet(suite string, known ...string) error {
	if _, err := o.AllowNodeQdisc(); err != nil {
		return fmt.Errorf("suite %s: %w", suite, err)
	}
	var bad []string
	for k := range o.Set {
		if !slices.Contains(known, k) && !slices.Contains(EnvSettings, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	want := "none"
	if len(known) > 0 {
		want = strings.Join(known, ", ")
	}
	return fmt.Errorf("suite %s: unknown setting %s (it takes: %s)", suite, strings.Join(bad, ", "), want)
}

// Phase is one run of a suite: a set of steps the server schedules as one
// run, with the changes the environment makes around it.
type Phase struct {
	// Name says what the phase measures ("tbf 1 Gbit/s, foreground EF"); it
	// is shown in the progress line and stored in the run's params.
	Name string `json:"name"`
	// Steps become the run's tasks, in this order.
	Steps []Step `json:"steps"`
	// Concurrent lets the phase's exclusive (throughput) steps share nodes
	// and run at once (api.RunCreate.AllowConcurrency): a background flood
	// and the foreground flow it should disturb. Without it the server runs
	// at most one exclusive task per node at a time.
	Concurrent bool `json:"concurrent,omitempty"`
	// Changes are made, in order, before the phase's run is created and
	// undone in reverse order after it ends, however it ends (failed,
	// interrupted), within a bounded time.
	Changes []Change `json:"changes,omitempty"`
}

// Registry holds the suites by name. Build it explicitly (see Builtin) and
// add other areas' suites with Add.
type Registry struct {
	suites map[string]Suite
}

// NewRegistry returns a registry holding suites; a repeated name panics, as
// it is a programming error.
func NewRegistry(suites ...Suite) *Registry {
	r := &Registry{suites: map[string]Suite{}}
	for _, s := range suites {
		r.Add(s)
	}
	return r
}

// Add registers s; a repeated name panics.
func (r *Registry) Add(s Suite) {
	if _, dup := r.suites[s.Name()]; dup {
		panic("suite: " + s.Name() + " registered twice")
	}
	r.suites[s.Name()] = s
}

// Get returns the suite named name, or an error listing the known ones.
func (r *Registry) Get(name string) (Suite, error) {
	if s, ok := r.suites[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown suite %q (known: %s)", name, strings.Join(r.Names(), ", "))
}

// Names returns the registered suites' names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.suites))
	for n := range r.suites {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// An OptionsChecker is a suite that can check its options and settings
// before anything is built (a lab, a run); the backend may be unknown
// then, so what depends on it is checked again in Plan.
type OptionsChecker interface {
	CheckOptions(o Options) error
}

// An Announcer states its plan before the run (the matrix: pairs a
// cycle, rounds, the window in which every pair is covered); the Runner
// logs the statement and writes it to Progress.
type Announcer interface {
	Announce(agents []Endpoint, o Options) string
}

// A Follower is a suite whose later phases depend on the outcomes of the
// earlier ones (a search). After the phases Plan returned, the Runner calls
// Follow with every outcome so far, in plan order, and runs the phases it
// returns, until it returns none. Like Rows, Follow must depend only on
// its arguments.
type Follower interface {
	Follow(agents []Endpoint, o Options, caps Caps, done []Outcome) ([]Phase, error)
}
