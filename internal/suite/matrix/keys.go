package matrix

import (
	"errors"
	"strconv"

	"github.com/cnperf/cnperf/internal/suite"
)

// Settings is the table of the suite's settings, reading into m; the
// defaults are the suite's own (Options.withDefaults).
func Settings(m *Options) suite.Settings {
	d := Options{}.withDefaults()
	positive := func(p *int) func(string) error {
		return func(v string) (err error) {
			if *p, err = strconv.Atoi(v); err == nil && *p < 1 {
				err = errors.New("want a positive whole number")
			}
			return err
		}
	}
	return suite.Settings{
		{Key: suite.Key{Name: "endpoints", Unit: "pods|hosts", Default: d.Endpoints, Meaning: "a pod per node (the pod network) or the host-network agents"},
			Set: func(v string) error {
				if v != "pods" && v != "hosts" {
					return errors.New("want pods or hosts")
				}
				m.Endpoints = v
				return nil
			}},
		{Key: suite.Key{Name: "udp-rate", Unit: "bit/s", Default: suite.KeyRate(d.UDPRateBps), Meaning: "rate of each pair's UDP loss measurement"},
			Set: func(v string) (err error) {
				if m.UDPRateBps, err = suite.ParseRate(v); err == nil && m.UDPRateBps == 0 {
					err = errors.New("rate 0: give a rate below the paths' capacity, e.g. 500M")
				}
				return err
			}},
		{Key: suite.Key{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
			Set: positive(&m.UDPSize)},
		{Key: suite.Key{Name: "ping-count", Unit: "count", Default: strconv.Itoa(d.PingCount), Meaning: "ICMP echoes per pair, 10 ms apart"},
			Set: positive(&m.PingCount)},
		{Key: suite.Key{Name: "outlier-mads", Unit: "number", Default: strconv.FormatFloat(d.OutlierMADs, 'g', -1, 64), Meaning: "a pair is an outlier beyond median ± this many MADs (and 10 %)"},
			Set: func(v string) (err error) {
				if m.OutlierMADs, err = strconv.ParseFloat(v, 64); err == nil && (m.OutlierMADs <= 0 || m.OutlierMADs > 100) {
					err = errors.New("want above 0, e.g. 3")
				}
				return err
			}},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
