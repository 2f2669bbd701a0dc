package shaping

import (
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// FlowKeys are the settings that shape the flows of every suite built on
// this one's steps (shaping, policing): protos, loads, udp-size and
// placement.
func FlowKeys() []suite.Key {
	d := Options{}.WithDefaults()
	return []suite.Key{
		{Name: "protos", Unit: "list of tcp, udp", Default: strings.Join(d.Protos, ","), Meaning: "protocols of the flows"},
		{Name: "loads", Unit: "list of below, at, above, flood (100x)", Default: strings.Join(d.Loads, ","), Meaning: "offered load against the limit, one flow each"},
		{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
		{Name: "placement", Unit: "list of same-node, cross-node", Default: "both where the agents allow",
			Meaning: "the limited pod's peer on its own node or on another; rows and verdicts per placement"},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key {
	return append([]suite.Key{
		{Name: "egress-bandwidth", Unit: "bit/s, a Kubernetes quantity (10M, 1G)", Default: "10M when no ingress-bandwidth is given", Meaning: "limit on what the pod sends (kubernetes.io/egress-bandwidth)"},
		{Name: "ingress-bandwidth", Unit: "bit/s, a Kubernetes quantity", Default: "none", Meaning: "limit on what the pod receives (kubernetes.io/ingress-bandwidth)"},
		{Name: "burst", Unit: "list of bytes (32Ki,4Mi)", Default: FormatBytes(DefaultBurst), Meaning: "token bucket sizes, one phase each (the lab only: on Kubernetes the CNI chooses it)"},
		{Name: "drain", Unit: "true or false", Default: "true", Meaning: "Kubernetes only: empty the CNI's token bucket with one unthrottled flow first; false measures the bucket a fresh pod gets (its default burst in the overshoot and time-to-conform figures)"},
		{Name: "annotations", Unit: "kubernetes or calico", Default: "kubernetes", Meaning: "Kubernetes only: ask for the limit with kubernetes.io/*-bandwidth, or with Calico's own qos.projectcalico.org/*Bandwidth (Felix applies both; default burst 4 Gibit = 512 MiB)"},
	}, FlowKeys()...)
}
