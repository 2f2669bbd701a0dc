package qos

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
)

// Set-up names a Spec accepts.
const (
	SpecPfifoFast   = "pfifo_fast"
	SpecHTBPriority = "htb-priority"
	SpecTBF         = "tbf"
)

// SpecSetups lists the set-ups a Spec can name.
var SpecSetups = []string{SpecPfifoFast, SpecHTBPriority, SpecTBF}

// Spec is a set-up as a task names it in JSON, e.g.
// {"setup":"tbf","rate_bps":20000000,"burst_bytes":32768}. Build turns it
// into the Setup it names; fields the named set-up does not use are
// refused, so a typo cannot silently do nothing.
type Spec struct {
	// Setup is pfifo_fast, htb-priority or tbf.
	Setup string `json:"setup"`
	// RateBps is the htb parent rate or the tbf rate, in bits/s.
	RateBps uint64 `json:"rate_bps,omitempty"`
	// HighRateBps is the htb high class's guaranteed rate (0: RateBps/2).
	HighRateBps uint64 `json:"high_rate_bps,omitempty"`
	// DSCP lists the values (0-63) the htb high class takes.
	DSCP []int `json:"dscp,omitempty"`
	// Leaf is the htb leaves' FIFO size.
	Leaf *QueueLimit `json:"leaf,omitempty"`
	// BurstBytes is the tbf bucket.
	BurstBytes uint32 `json:"burst_bytes,omitempty"`
	// LimitBytes is the tbf queue (0: rate × 25 ms + burst, as the CNI
	// bandwidth plugin).
	LimitBytes uint32 `json:"limit_bytes,omitempty"`
}

// specFields maps a Setup's validation field names to Spec's JSON keys.
var specFields = map[string]string{
	"rate": "rate_bps", "high rate": "high_rate_bps", "dscp": "dscp",
	"leaf queue": "leaf", "burst": "burst_bytes", "limit": "limit_bytes",
}

// Build validates s and returns the Setup it names. Its errors are
// *ValidationError with Field set to the JSON key at fault ("setup",
// "rate_bps", "dscp", ...).
func (s Spec) Build() (Setup, error) {
	used := map[string]bool{}
	var setup Setup
	switch s.Setup {
	case SpecPfifoFast:
		setup = PfifoFast{}
	case SpecHTBPriority:
		p := HTBPriority{Rate: s.RateBps, HighRate: s.HighRateBps, HighDSCP: s.DSCP}
		if s.Leaf != nil {
			p.Leaf = *s.Leaf
		}
		setup = p
		used = map[string]bool{"rate_bps": true, "high_rate_bps": true, "dscp": true, "leaf": true}
	case SpecTBF:
		setup = TBF{Rate: s.RateBps, BurstBytes: s.BurstBytes, LimitBytes: s.LimitBytes}
		used = map[string]bool{"rate_bps": true, "burst_bytes": true, "limit_bytes": true}
	case "":
		return nil, invalid("setup", "missing (want one of %s)", strings.Join(SpecSetups, ", "))
	default:
		return nil, invalid("setup", "unknown set-up %q (want one of %s)", s.Setup, strings.Join(SpecSetups, ", "))
	}
	given := map[string]bool{
		"rate_bps": s.RateBps != 0, "high_rate_bps": s.HighRateBps != 0, "dscp": s.DSCP != nil,
		"leaf": s.Leaf != nil, "burst_bytes": s.BurstBytes != 0, "limit_bytes": s.LimitBytes != 0,
	}
	for _, k := range []string{"rate_bps", "high_rate_bps", "dscp", "leaf", "burst_bytes", "limit_bytes"} {
		if given[k] && !used[k] {
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

// String describes the set-up in a line, for notes and logs.
func (s Spec) String() string {
	switch s.Setup {
	case SpecHTBPriority:
		return fmt.Sprintf("htb-priority rate %d bit/s, DSCP %v to the high class", s.RateBps, s.DSCP)
	case SpecTBF:
		return fmt.Sprintf("tbf rate %d bit/s burst %d B", s.RateBps, s.BurstBytes)
	}
	return s.Setup
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
