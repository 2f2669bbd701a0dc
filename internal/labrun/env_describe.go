package labrun

import (
	"context"
	"errors"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// describer is a lab that can say what it is; *lab.Lab is one.
type describer interface {
	Environment(ctx context.Context) (*hostinfo.Environment, error)
}

// Environment implements suite.Describer with the lab's own description.
func (e *Env) Environment(ctx context.Context) (*hostinfo.Environment, error) {
	d, ok := e.links.(describer)
	if !ok {
		return nil, errors.New("this lab cannot describe itself")
	}
	return d.Environment(ctx)
}
