package matrix

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
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
		{Key: suite.Key{Name: "plan", Unit: "all|sample|zones", Default: d.Plan, Meaning: "which pairs a cycle measures: every ordered pair, peers a node rotating each cycle, or every pair inside a zone and representatives across"},
			Set: func(v string) error {
				if v != pairplan.PlanAll && v != pairplan.PlanSample && v != pairplan.PlanZones {
					return errors.New("want all, sample or zones")
				}
				m.Plan = v
				return nil
			}},
		{Key: suite.Key{Name: "peers", Unit: "count", Default: strconv.Itoa(d.Peers), Meaning: "peers a node per cycle (plan=sample): every pair within ceil((N-1)/peers) cycles"},
			Set: positive(&m.Peers)},
		{Key: suite.Key{Name: "cycles", Unit: "count", Default: "window", Meaning: "cycles this run measures (at most 10000); default the plan's window, so one run covers every pair (a schedule: 1 a run)"},
			Set: func(v string) error {
				if err := positive(&m.Cycles)(v); err != nil {
					return err
				}
				if m.Cycles > 10000 {
					return errors.New("at most 10000")
				}
				return nil
			}},
		{Key: suite.Key{Name: "cycle", Unit: "count", Default: strconv.Itoa(d.Cycle), Meaning: "number of this run's first cycle (a schedule counts its runs)"},
			Set: func(v string) (err error) {
				if m.Cycle, err = strconv.Atoi(v); err == nil && m.Cycle < 0 {
					err = errors.New("want 0 or more")
				}
				return err
			}},
		{Key: suite.Key{Name: "zone-label", Unit: "label", Default: d.ZoneLabel, Meaning: "the node label plan=zones groups nodes by"},
			Set: func(v string) error {
				if v == "" || len(v) > 317 || strings.ContainsAny(v, " \t\n,=") {
					return errors.New("want a node label's key, e.g. topology.kubernetes.io/zone")
				}
				m.ZoneLabel = v
				return nil
			}},
		{Key: suite.Key{Name: "jitter", Unit: "duration", Default: "1s (plan=all: 0)", Meaning: "each pair of a round starts up to this much late, by a hash of the cycle and the pair (at most 10s; 0: all at once)"},
			Set: func(v string) (err error) {
				if m.Jitter, err = time.ParseDuration(v); err == nil && (m.Jitter < 0 || m.Jitter > MaxJitter) {
					err = fmt.Errorf("want 0 to %v, e.g. 1s", MaxJitter)
				}
				return err
			}},
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
