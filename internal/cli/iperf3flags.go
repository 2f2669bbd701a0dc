package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// countFlag is `cnperf probe`'s -c: a count, as ping's -c. iperf3's -c
// names the server instead; a value that is not a count says where the
// peer goes.
type countFlag struct{ n *int }

func countVarP(fl *pflag.FlagSet, p *int, name, shorthand, usage string) {
	fl.VarP(countFlag{p}, name, shorthand, usage)
}

// Set implements pflag.Value.
func (c countFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a count: -c counts packets or transactions, as ping's -c; the peer is --to HOST:PORT (iperf3's -c HOST -p PORT)", s)
	}
	*c.n = n
	return nil
}

// String implements pflag.Value.
func (c countFlag) String() string {
	if c.n == nil {
		return "0"
	}
	return strconv.Itoa(*c.n)
}

// Type implements pflag.Value.
func (countFlag) Type() string { return "int" }

// intervalReportsOff reports `-i 0` on a tcp or udp probe: as iperf3's
// -i 0, no interval reports are printed (the probe still samples at its
// default interval, for the result's intervals).
func (f *probeFlags) intervalReportsOff(fl *pflag.FlagSet, kind string) bool {
	return fl.Changed("interval") && f.interval == 0 && (kind == "tcp" || kind == "udp")
}
