package suite

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// MetricSuccess is the availability objectives' metric: the percentage
// of the ping mesh's echo requests that were answered over a window.
const MetricSuccess = "success"

// MeshAvailability is what the server's stored ping-mesh rounds say about
// a window: requests sent and answered, over how many rounds and probes,
// and how much of the window the rounds cover.
type MeshAvailability struct {
	Window probe.Duration `json:"window"`
	// Covered is the part of the window the stored rounds span: from the
	// oldest round in it to the window's end.
	Covered probe.Duration `json:"covered"`
	Rounds  int            `json:"rounds"`
	// Probes are the mesh's pings in the window; Failed those that failed
	// or timed out (all their requests count as unanswered).
	Probes   int   `json:"probes"`
	Failed   int   `json:"failed"`
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
}

// SuccessPct is Received over Sent in percent (NaN when nothing was sent).
func (a MeshAvailability) SuccessPct() float64 {
	if a.Sent == 0 {
		return math.NaN()
	}
	return 100 * float64(a.Received) / float64(a.Sent)
}

// MinCoverage is the part of an availability window the stored rounds
// must span: a mesh that started ten minutes ago cannot vouch for an hour.
const MinCoverage = 0.5

// AvailabilitySource measures the mesh's availability over the window
// ending now, for one path kind (connection; "" for every path).
type AvailabilitySource func(window time.Duration, connection string) (MeshAvailability, error)

// parseAvailability reads "success OP VALUE % over WINDOW" (the % may be
// joined to the value: "99.9%").
func (o *Objective) parseAvailability(fields []string) error {
	var rest []string
	for _, f := range fields[2:] {
		if v, ok := strings.CutSuffix(f, "%"); ok && v != "" {
			rest = append(rest, v, "%")
			continue
		}
		rest = append(rest, f)
	}
	if len(rest) != 4 || rest[1] != "%" || rest[2] != "over" {
		return fmt.Errorf("expr %q: an availability objective reads \"success >= 99.9 %% over 1h\"", o.Expr)
	}
	if len(o.Select) > 0 || len(o.Versus) > 0 || o.Stat != "" {
		return fmt.Errorf("expr %q: an availability objective takes no select, vs or stat (only a connection: the mesh's path kind)", o.Expr)
	}
	o.Metric, o.Op = fields[0], fields[1]
	if !validOp(o.Op) {
		return fmt.Errorf("unknown operator %q in %q (want <, <=, >, >= or ==)", o.Op, o.Expr)
	}
	v, err := strconv.ParseFloat(rest[0], 64)
	if err != nil || v < 0 || v > 100 {
		return fmt.Errorf("value %q in %q: want a percentage 0-100", rest[0], o.Expr)
	}
	w, err := time.ParseDuration(rest[3])
	if err != nil || w < time.Minute || w > 31*24*time.Hour {
		return fmt.Errorf("window %q in %q: want a duration from 1m to 744h (1h, 24h)", rest[3], o.Expr)
	}
	o.Threshold, o.Window, o.Availability = v, w, true
	return nil
}

// EvaluateAvailability checks the availability objectives of objs (the
// others are Evaluate's) against the mesh's stored rounds. An objective
// fails, with the reason in its detail, when the source cannot be read,
// when no echo request was sent in the window, or when the rounds cover
// less than MinCoverage of it.
func EvaluateAvailability(objs []Objective, src AvailabilitySource) []Check {
	var out []Check
	for _, o := range objs {
		if !o.Availability {
			continue
		}
		c := Check{Objective: o, Connection: o.Connection, Value: math.NaN()}
		if src == nil {
			c.Detail = "(no server to read the ping mesh's rounds from)"
			out = append(out, c)
			continue
		}
		a, err := src(o.Window, o.Connection)
		if err != nil {
			c.Detail = "(" + err.Error() + ")"
			out = append(out, c)
			continue
		}
		c.Availability = &a
		v := a.SuccessPct()
		switch {
		case math.IsNaN(v):
			c.Detail = fmt.Sprintf("(no ping-mesh round in the last %v: does the server run the mesh? cnperf server --mesh-interval 1m)", o.Window)
		case a.Covered.D().Seconds() < MinCoverage*o.Window.Seconds():
			c.Value = v
			c.Detail = fmt.Sprintf("(the stored rounds cover only %v of the %v window, less than %.0f %%)", a.Covered.D().Round(time.Second), o.Window, 100*MinCoverage)
		default:
			c.Value, c.Pass = v, compare(v, o.Op, o.Threshold)
			c.Detail = fmt.Sprintf("%% over %v: %d of %d echo requests answered in %d rounds (%d probes, %d failed)",
				o.Window, a.Received, a.Sent, a.Rounds, a.Probes, a.Failed)
		}
		out = append(out, c)
	}
	return out
}

// HasAvailability reports whether objs hold an availability objective.
func HasAvailability(objs []Objective) bool {
	for _, o := range objs {
		if o.Availability {
			return true
		}
	}
	return false
}

// errNotAvailability names a row objective where only availability ones
// are evaluated.
var errNotAvailability = errors.New("not an availability objective")

// OnlyAvailability returns an error naming the first objective that is
// not an availability objective (for `cnperf slo check`, which has no
// rows).
func OnlyAvailability(objs []Objective) error {
	for i, o := range objs {
		if !o.Availability {
			return fmt.Errorf("objective %d (%s): %w; objectives on rows are evaluated with a run: cnperf run SUITE --slo FILE", i+1, o.Expr, errNotAvailability)
		}
	}
	return nil
}
