package cli

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// secondsOrDuration is the value of a --time flag: a Go duration ("2s",
// "500ms", "1m30s") or, as iperf3's -t takes it, a bare number of seconds
// ("2", "2.5").
type secondsOrDuration struct{ d *time.Duration }

// secondsOrDurationVarP defines a --time flag (shorthand "" for none) that
// takes a duration or a number of seconds.
func secondsOrDurationVarP(fl *pflag.FlagSet, p *time.Duration, name, shorthand string, def time.Duration, usage string) {
	*p = def
	fl.VarP(secondsOrDuration{p}, name, shorthand, usage)
}

// Set implements pflag.Value.
func (v secondsOrDuration) Set(s string) error {
	d, err := parseSecondsOrDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// String implements pflag.Value.
func (v secondsOrDuration) String() string {
	if v.d == nil || *v.d == 0 {
		return "0" // what pflag takes for a zero default, as for a time.Duration flag
	}
	return v.d.String()
}

// Type implements pflag.Value; it names the value in --help as a
// time.Duration flag does.
func (secondsOrDuration) Type() string { return "duration" }

// parseSecondsOrDuration reads a Go duration or a number of seconds.
func parseSecondsOrDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return 0, fmt.Errorf("%q: want a duration like 10s or 500ms, or a number of seconds", s)
	}
	if math.Abs(secs) > math.MaxInt64/float64(time.Second) {
		return 0, fmt.Errorf("%q seconds is too long", s)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
