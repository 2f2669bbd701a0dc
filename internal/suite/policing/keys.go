package policing

import (
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key {
	return append([]suite.Key{
		{Name: "rate", Unit: "bit/s (10M)", Default: "10M", Meaning: "the police action's rate on arrival at the pod's host-side veth"},
		{Name: "burst", Unit: "bytes (32Ki)", Default: shaping.FormatBytes(shaping.DefaultBurst), Meaning: "the policer's bucket (and, in the lab, the ingress limit's)"},
		{Name: "ingress-bandwidth", Unit: "bit/s, a Kubernetes quantity (1M)", Default: "none (with variants=cni-ingress: the rate)",
			Meaning: "the CNI bandwidth plugin's limit on what the pod receives (kubernetes.io/ingress-bandwidth); setting it adds the cni-ingress variant: UDP at the limit and at 100x it, unless protos/loads say otherwise"},
		{Name: "variants", Unit: "list of police, cni-ingress", Default: "police, and cni-ingress when ingress-bandwidth is set",
			Meaning: "what polices the pod: the police action (what it sends), the CNI's ingress limit (what it receives)"},
	}, shaping.FlowKeys()...)
}
