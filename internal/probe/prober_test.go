package probe

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// nopProber measures nothing and says when it ran.
type nopProber struct{ ran *time.Time }

func (nopProber) Name() string             { return KindUDP }
func (nopProber) Validate(spec Spec) error { return spec.ValidateCommon(false) }
func (p nopProber) Run(context.Context, Spec, Env) (*Result, error) {
	*p.ran = time.Now()
	return &Result{Kind: KindUDP}, nil
}

// TestRegistryStartDelay: a spec's start_delay holds the probe back that
// long, a cancelled context ends the wait, and a delay above the bound is
// refused.
func TestRegistryStartDelay(t *testing.T) {
	var ran time.Time
	r := NewRegistry(nopProber{ran: &ran})
	spec := Spec{Kind: KindUDP, Target: "198.18.0.2:5201", StartDelay: Duration(80 * time.Millisecond)}
	start := time.Now()
	if _, err := r.Run(context.Background(), spec, Env{}); err != nil {
		t.Fatal(err)
	}
	if d := ran.Sub(start); d < 80*time.Millisecond {
		t.Errorf("the probe ran %v after the call, want at least the 80ms delay", d)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("stopped by the test"))
	ran = time.Time{}
	if _, err := r.Run(ctx, spec, Env{}); err == nil || !strings.Contains(err.Error(), "stopped by the test") || !ran.IsZero() {
		t.Errorf("cancelled wait: err %v, ran %v; want the cause and no run", err, !ran.IsZero())
	}
	spec.StartDelay = Duration(MaxStartDelay + time.Second)
	if _, err := r.Run(context.Background(), spec, Env{}); err == nil || !strings.Contains(err.Error(), "start_delay") {
		t.Errorf("delay above the bound: err %v", err)
	}
}
