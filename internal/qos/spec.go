package qos

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/vishvananda/netlink"
)

// Spec is a set-up as data (see qosspec.Spec); Build turns it into the
// Setup it names.
type Spec = qosspec.Spec

// Set-up names a Spec accepts.
const (
	SpecPfifoFast    = qosspec.SpecPfifoFast
	SpecHTBPriority  = qosspec.SpecHTBPriority
	SpecTBF          = qosspec.SpecTBF
	SpecBottleneck   = qosspec.SpecBottleneck
	SpecBandwidth    = qosspec.SpecBandwidth
	SpecPolice       = qosspec.SpecPolice
	SpecVXLANInherit = qosspec.SpecVXLANInherit
)

// SpecSetups lists the set-ups a Spec can name.
var SpecSetups = qosspec.SpecSetups

// specFields maps a Setup's validation field names to Spec's JSON keys.
var specFields = map[string]string{
	"rate": "rate_bps", "high rate": "high_rate_bps", "dscp": "dscp",
	"leaf queue": "leaf", "burst": "burst_bytes", "limit": "limit_bytes", "queue": "queue_bytes",
	"ingress rate": "ingress_rate_bps", "ingress burst": "ingress_burst_bytes",
	"egress rate": "egress_rate_bps", "egress burst": "egress_burst_bytes",
}

// specKeys are Spec's parameter keys, in the order they are checked.
var specKeys = []string{"rate_bps", "high_rate_bps", "dscp", "leaf", "burst_bytes", "limit_bytes", "queue_bytes",
	"ingress_rate_bps", "ingress_burst_bytes", "egress_rate_bps", "egress_burst_bytes"}

// Build validates s and returns the Setup it names. Its errors are
// *ValidationError with Field set to the JSON key at fault ("setup",
// "rate_bps", "dscp", ...).
func Build(s Spec) (Setup, error) {
	var used []string
	var setup Setup
	switch s.Setup {
	case SpecPfifoFast:
		setup = PfifoFast{}
	case SpecHTBPriority:
		p := HTBPriority{Rate: s.RateBps, HighRate: s.HighRateBps, HighDSCP: s.DSCP}
		if s.Leaf != nil {
			p.Leaf = QueueLimit{Bytes: s.Leaf.Bytes, Packets: s.Leaf.Packets}
		}
		setup = p
		used = []string{"rate_bps", "high_rate_bps", "dscp", "leaf"}
	case SpecTBF:
		setup = TBF{Rate: s.RateBps, BurstBytes: s.BurstBytes, LimitBytes: s.LimitBytes}
		used = []string{"rate_bps", "burst_bytes", "limit_bytes"}
	case SpecBottleneck:
		setup = Bottleneck{Rate: s.RateBps, QueueBytes: s.QueueBytes}
		used = []string{"rate_bps", "queue_bytes"}
	case SpecBandwidth:
		setup = BandwidthPlugin{IngressRate: s.IngressRateBps, IngressBurst: s.IngressBurstBytes, EgressRate: s.EgressRateBps, EgressBurst: s.EgressBurstBytes}
		used = []string{"ingress_rate_bps", "ingress_burst_bytes", "egress_rate_bps", "egress_burst_bytes"}
	case SpecPolice:
		setup = Police{Rate: s.RateBps, BurstBytes: s.BurstBytes}
		used = []string{"rate_bps", "burst_bytes"}
	case SpecVXLANInherit:
		setup = &VXLANInherit{}
	case "":
		return nil, invalid("setup", "missing (want one of %s)", strings.Join(SpecSetups, ", "))
	default:
		return nil, invalid("setup", "unknown set-up %q (want one of %s)", s.Setup, strings.Join(SpecSetups, ", "))
	}
	given := map[string]bool{
		"rate_bps": s.RateBps != 0, "high_rate_bps": s.HighRateBps != 0, "dscp": s.DSCP != nil,
		"leaf": s.Leaf != nil, "burst_bytes": s.BurstBytes != 0, "limit_bytes": s.LimitBytes != 0, "queue_bytes": s.QueueBytes != 0,
		"ingress_rate_bps": s.IngressRateBps != 0, "ingress_burst_bytes": s.IngressBurstBytes != 0,
		"egress_rate_bps": s.EgressRateBps != 0, "egress_burst_bytes": s.EgressBurstBytes != 0,
	}
	for _, k := range specKeys {
		if given[k] && !slices.Contains(used, k) {
			return nil, invalid(k, "not a parameter of the %s set-up", s.Setup)
		}
	}
	if err := setup.Validate(); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			field := specFields[ve.Field]
			if field == "" {
				field = ve.Field
			}
			return nil, &ValidationError{Field: field, Reason: ve.Reason}
		}
		return nil, fmt.Errorf("%s: %w", s.Setup, err)
	}
	return setup, nil
}

// LinkWithAddr names the link in namespace nsPath ("" for the caller's)
// that holds address ip, e.g. the interface of a pod's IP.
func LinkWithAddr(nsPath string, ip netip.Addr) (string, error) {
	c, err := openConn(nsPath)
	if err != nil {
		return "", err
	}
	defer c.close()
	addrs, err := c.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return "", fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip.Unmap() {
			link, err := c.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return "", fmt.Errorf("link of %s: %w", ip, err)
			}
			return link.Attrs().Name, nil
		}
	}
	return "", fmt.Errorf("no interface holds %s: %w", ip, ErrLinkNotFound)
}

// LinkToward returns the name of the interface the namespace at nsPath
// ("" for the caller's) routes dst through: a node's way to another node
// or pod. An address of the namespace itself (the route through lo) is
// an error, as is a destination without a route.
func LinkToward(nsPath string, dst netip.Addr) (string, error) {
	c, err := openConn(nsPath)
	if err != nil {
		return "", err
	}
	defer c.close()
	routes, err := c.h.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return "", fmt.Errorf("no route to %s: %v: %w", dst, err, ErrLinkNotFound)
	}
	link, err := c.h.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return "", fmt.Errorf("link of the route to %s: %w", dst, err)
	}
	if link.Attrs().Flags&net.FlagLoopback != 0 {
		return "", fmt.Errorf("%s is this namespace's own address (route through %s): %w", dst, link.Attrs().Name, ErrLinkNotFound)
	}
	return link.Attrs().Name, nil
}
