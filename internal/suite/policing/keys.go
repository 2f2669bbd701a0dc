package policing

import (
	"errors"
	"fmt"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// settings is the table of the suite's settings: the police rate and
// burst into so, the CNI's ingress limit into ingressBps, the variants
// into po.
func settings(po *options, so *shaping.Options, ingressBps *uint64) suite.Settings {
	return append(suite.Settings{
		{Key: suite.Key{Name: "rate", Unit: "bit/s (10M)", Default: "10M", Meaning: "the police action's rate on arrival at the pod's host-side veth"},
			Set: suite.SetBandwidth(&so.EgressBps)},
		{Key: suite.Key{Name: "burst", Unit: "bytes (32Ki)", Default: shaping.FormatBytes(shaping.DefaultBurst), Meaning: "the policer's bucket (and, in the lab, the ingress limit's)"},
			Set: func(v string) (err error) {
				if so.Bursts, err = shaping.ParseBursts(v); err == nil && len(so.Bursts) != 1 {
					err = errors.New("policing takes one burst")
				}
				return err
			}},
		{Key: suite.Key{Name: "ingress-bandwidth", Unit: "bit/s (1M)", Default: "none (with variants=cni-ingress: the rate)",
			Meaning: "the CNI bandwidth plugin's limit on what the pod receives (kubernetes.io/ingress-bandwidth); setting it adds the cni-ingress variant: UDP at the limit and at 100x it, unless protos/loads say otherwise"},
			Set: suite.SetBandwidth(ingressBps)},
		{Key: suite.Key{Name: "variants", Unit: "list of police, cni-ingress", Default: "police, and cni-ingress when ingress-bandwidth is set",
			Meaning: "what polices the pod: the police action (what it sends), the CNI's ingress limit (what it receives)"},
			Set: func(v string) error {
				po.variants = suite.SplitList(v)
				for _, x := range po.variants {
					if x != VariantPolice && x != VariantCNIIngress {
						return fmt.Errorf("variant %q: want %s or %s", x, VariantPolice, VariantCNIIngress)
					}
				}
				return nil
			}},
	}, shaping.FlowSettings(so)...)
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key {
	var ingress uint64
	return settings(&options{}, &shaping.Options{}, &ingress).Keys()
}
