package suite_test

import (
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/suite"
)

// TestSettingsApply: a table reads the keys given into its options,
// leaves the others at their defaults, refuses keys outside it (the
// environment's aside) and names the suite, key and value of a bad one.
func TestSettingsApply(t *testing.T) {
	type opts struct {
		rate  uint64
		n     int
		list  []string
		on    bool
		limit uint64
	}
	table := func(o *opts) suite.Settings {
		return suite.Settings{
			{Key: suite.Key{Name: "rate", Unit: "bit/s", Default: "1M", Meaning: "m"}, Set: suite.SetRate(&o.rate)},
			{Key: suite.Key{Name: "n", Unit: "count", Default: "3", Meaning: "m"}, Set: suite.SetInt(&o.n)},
			{Key: suite.Key{Name: "list", Unit: "list", Default: "a", Meaning: "m"}, Set: suite.SetList(&o.list)},
			{Key: suite.Key{Name: "on", Unit: "true|false", Default: "false", Meaning: "m"}, Set: suite.SetBool(&o.on)},
			{Key: suite.Key{Name: "limit", Unit: "bit/s", Default: "10M", Meaning: "m"}, Set: suite.SetBandwidth(&o.limit)},
		}
	}
	if got := strings.Join(table(&opts{}).Names(), ","); got != "rate,n,list,on,limit" {
		t.Errorf("names %s", got)
	}
	for _, c := range []struct {
		set  map[string]string
		want opts
		err  string
	}{
		{map[string]string{}, opts{n: 3}, ""},
		{map[string]string{"rate": "10m", "n": "5", "list": "x, y", "on": "true", "limit": "2Mi"}, opts{rate: 10e6, n: 5, list: []string{"x", "y"}, on: true, limit: 2 << 20}, ""},
		{map[string]string{suite.SetAllowNodeQdisc: "true"}, opts{n: 3}, ""},
		{map[string]string{"bogus": "1", "rate": "1M"}, opts{}, "suite s: unknown setting bogus (it takes: rate, n, list, on, limit)"},
		{map[string]string{"n": "many"}, opts{}, `suite s: n "many": want a whole number`},
		{map[string]string{"on": "yes please"}, opts{}, `suite s: on "yes please": want true or false`},
		{map[string]string{"rate": "fast"}, opts{}, `suite s: rate "fast"`},
		{map[string]string{"limit": "0"}, opts{}, `suite s: limit "0": rate 0 would stop all traffic`},
		{map[string]string{"limit": "100"}, opts{}, `want 1k to 32G bits/s`},
	} {
		o := opts{n: 3}
		err := table(&o).Apply("s", suite.Options{Set: c.set})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.set, err, c.err)
			}
			continue
		}
		if err != nil || o.rate != c.want.rate || o.n != c.want.n || strings.Join(o.list, "|") != strings.Join(c.want.list, "|") || o.on != c.want.on || o.limit != c.want.limit {
			t.Errorf("%v: %+v, %v; want %+v", c.set, o, err, c.want)
		}
	}
}

// TestParseRateSpellings: the one rate grammar.
func TestParseRateSpellings(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"10M", 10e6, true}, {"10m", 10e6, true}, {"10k", 10e3, true}, {"10K", 10e3, true}, {"1.5G", 1.5e9, true},
		{"100Mbit", 100e6, true}, {"10Mi", 10 << 20, true}, {"32Ki", 32 << 10, true}, {"1e7", 10e6, true}, {"0", 0, true},
		{"", 0, false}, {"-1M", 0, false}, {"ten", 0, false}, {"10X", 0, false},
	} {
		got, err := suite.ParseRate(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}
