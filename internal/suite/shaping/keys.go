package shaping

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// FlowSettings are the settings that shape the flows of every suite
// built on this one's steps (shaping, policing): protos, loads, udp-size
// and placement, reading into o.
func FlowSettings(o *Options) suite.Settings {
	d := Options{}.WithDefaults()
	return suite.Settings{
		{Key: suite.Key{Name: "protos", Unit: "list of tcp, udp", Default: strings.Join(d.Protos, ","), Meaning: "protocols of the flows"},
			Set: suite.SetList(&o.Protos)},
		{Key: suite.Key{Name: "loads", Unit: "list of below, at, above, flood (100x)", Default: strings.Join(d.Loads, ","), Meaning: "offered load against the limit, one flow each"},
			Set: suite.SetList(&o.Loads)},
		{Key: suite.Key{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
			Set: suite.SetInt(&o.UDPSize)},
		{Key: suite.Key{Name: "placement", Unit: "list of same-node, cross-node", Default: "both where the agents allow",
			Meaning: "the limited pod's peer on its own node or on another; rows and verdicts per placement"},
			Set: suite.SetList(&o.Placements)},
	}
}

// Settings is the table of the shaping suite's settings, reading into so.
func Settings(so *Options) suite.Settings {
	return append(suite.Settings{
		{Key: suite.Key{Name: "egress-bandwidth", Unit: "bit/s (10M, 1G)", Default: "10M when no ingress-bandwidth is given", Meaning: "limit on what the pod sends (kubernetes.io/egress-bandwidth)"},
			Set: suite.SetBandwidth(&so.EgressBps)},
		{Key: suite.Key{Name: "ingress-bandwidth", Unit: "bit/s", Default: "none", Meaning: "limit on what the pod receives (kubernetes.io/ingress-bandwidth)"},
			Set: suite.SetBandwidth(&so.IngressBps)},
		{Key: suite.Key{Name: "burst", Unit: "list of bytes (32Ki,4Mi)", Default: FormatBytes(DefaultBurst), Meaning: "token bucket sizes, one phase each (the lab only: on Kubernetes the CNI chooses it)"},
			Set: func(v string) (err error) { so.Bursts, err = ParseBursts(v); return err }},
		{Key: suite.Key{Name: "drain", Unit: "true or false", Default: "true", Meaning: "Kubernetes only: empty the CNI's token bucket with one unthrottled flow first; false measures the bucket a fresh pod gets (its default burst in the overshoot and time-to-conform figures)"},
			Set: func(v string) error {
				drain := true
				err := suite.SetBool(&drain)(v)
				so.NoDrain = !drain
				return err
			}},
		{Key: suite.Key{Name: "annotations", Unit: "kubernetes or calico", Default: "kubernetes", Meaning: "Kubernetes only: ask for the limit with kubernetes.io/*-bandwidth, or with Calico's own qos.projectcalico.org/*Bandwidth (Felix applies both; default burst 4 Gibit = 512 MiB)"},
			Set: func(v string) error {
				if v != suite.AnnotationsKubernetes && v != suite.AnnotationsCalico {
					return fmt.Errorf("want %s or %s", suite.AnnotationsKubernetes, suite.AnnotationsCalico)
				}
				so.Annotations = v
				return nil
			}},
	}, FlowSettings(so)...)
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
