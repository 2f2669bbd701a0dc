package suite

import (
	"fmt"
	"strconv"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
)

// A Setting is one --set KEY=VALUE a suite takes, declared once: what
// `cnperf suites`, --help and shell completion show (Key), and how the
// value is read into the suite's options (Set). A suite's table of
// Settings is the only list of its keys: Keys, the check for unknown
// keys and the parsing all come from it.
type Setting struct {
	Key
	// Set reads the value into the suite's options. Its error says what
	// a value should be; Apply names the suite, the key and the value.
	Set func(v string) error
}

// Settings is a suite's table of settings, in the order help shows them.
type Settings []Setting

// Keys documents the settings (Keyed).
func (ss Settings) Keys() []Key {
	out := make([]Key, len(ss))
	for i, s := range ss {
		out[i] = s.Key
	}
	return out
}

// Names are the settings' keys.
func (ss Settings) Names() []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

// Apply refuses the keys of o.Set that are neither in the table nor the
// environment's (EnvSettings), then reads each given value with its
// setting's Set, in table order. A setting not given keeps the value
// the options had (the suite's default).
func (ss Settings) Apply(suite string, o Options) error {
	if err := o.CheckSet(suite, ss.Names()...); err != nil {
		return err
	}
	for _, s := range ss {
		v, ok := o.Set[s.Name]
		if !ok {
			continue
		}
		if err := s.Set(v); err != nil {
			return fmt.Errorf("suite %s: %s %q: %w", suite, s.Name, v, err)
		}
	}
	return nil
}

// The parsers settings share.

// ParseRate reads every rate setting of every suite: bits per second as
// iperf3's -b writes them (probe.ParseRate: an optional k, M, G or T in
// either case, powers of 1000, so "10m" is 10 Mbit/s). A Kubernetes
// quantity with a binary suffix ("10Mi"), which the bandwidth settings
// once took, is read too, so runs stored with one still render.
func ParseRate(s string) (uint64, error) {
	v, err := probe.ParseRate(s)
	if err == nil {
		return v, nil
	}
	if q, qerr := qosspec.ParseQuantity(s); qerr == nil {
		return uint64(q), nil
	}
	return 0, err
}

// ParseBandwidth reads a pod bandwidth limit with ParseRate: at least
// 1 kbit/s, at most qosspec.MaxBandwidthBps.
func ParseBandwidth(s string) (uint64, error) {
	v, err := ParseRate(s)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, fmt.Errorf("rate 0 would stop all traffic; give a rate such as 10M")
	}
	if v < 1e3 || v > qosspec.MaxBandwidthBps {
		return 0, fmt.Errorf("want 1k to 32G bits/s")
	}
	return v, nil
}

// SetRate returns a Set that reads a rate (ParseRate) into p.
func SetRate(p *uint64) func(string) error {
	return func(v string) (err error) { *p, err = ParseRate(v); return err }
}

// SetBandwidth returns a Set that reads a bandwidth limit into p.
func SetBandwidth(p *uint64) func(string) error {
	return func(v string) (err error) { *p, err = ParseBandwidth(v); return err }
}

// SetInt returns a Set that reads a whole number into p.
func SetInt(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number")
		}
		*p = n
		return nil
	}
}

// SetBool returns a Set that reads true or false into p.
func SetBool(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		*p = b
		return nil
	}
}

// SetList returns a Set that reads a comma-separated list into p.
func SetList(p *[]string) func(string) error {
	return func(v string) error { *p = SplitList(v); return nil }
}
