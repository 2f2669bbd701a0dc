package probe

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// A Prober measures one property of the path from this host to a peer.
type Prober interface {
	// Name is the probe kind it serves ("tcp", "udp", ...).
	Name() string
	// Validate rejects bad parameters before anything is scheduled or sent.
	Validate(spec Spec) error
	// Run measures. It honours ctx, bounds every blocking operation, returns
	// typed figures and never prints.
	Run(ctx context.Context, spec Spec, env Env) (*Result, error)
}

// Registry maps probe kinds to probers. Build it explicitly in main.
type Registry struct {
	probers map[string]Prober
}

// NewRegistry returns a registry of the given probers.
func NewRegistry(ps ...Prober) *Registry {
	r := &Registry{probers: make(map[string]Prober, len(ps))}
	for _, p := range ps {
		r.probers[p.Name()] = p
	}
	return r
}

// Get returns the prober for kind.
func (r *Registry) Get(kind string) (Prober, error) {
	p, ok := r.probers[kind]
	if !ok {
		return nil, fmt.Errorf("unknown probe kind %q (known: %v)", kind, r.Kinds())
	}
	return p, nil
}

// Kinds lists the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	ks := make([]string, 0, len(r.probers))
	for k := range r.probers {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Validate checks spec with the prober of its kind.
func (r *Registry) Validate(spec Spec) error {
	p, err := r.Get(spec.Kind)
	if err != nil {
		return err
	}
	return p.Validate(spec)
}

// Run validates and runs spec with the prober of its kind. The result
// echoes the spec's request (Spec.Request).
func (r *Registry) Run(ctx context.Context, spec Spec, env Env) (*Result, error) {
	p, err := r.Get(spec.Kind)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(spec); err != nil {
		return nil, fmt.Errorf("invalid %s probe: %w", spec.Kind, err)
	}
	if d := spec.StartDelay.D(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting %v before the %s probe: %w", d, spec.Kind, context.Cause(ctx))
		case <-t.C:
		}
	}
	res, err := p.Run(ctx, spec, env)
	if res != nil {
		res.Request = spec.Request()
	}
	return res, err
}

// StoppedEarly is the note of a result cut short by ctx (an interrupt):
// its figures cover the time until then.
func StoppedEarly(ctx context.Context) string {
	return "stopped early: " + context.Cause(ctx).Error()
}
