package qos

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CNILatency is the queueing latency the CNI bandwidth plugin allows its
// tbf: limit = rate × 25 ms + burst.
const CNILatency = 25 * time.Millisecond

// CNILimitBytes returns the tbf limit the CNI bandwidth plugin uses for a
// rate in bits/s and a burst in bytes: rate × 25 ms + burst.
func CNILimitBytes(rateBps uint64, burstBytes uint32) uint32 {
	return limitFor(rateBps, CNILatency, burstBytes)
}

// BandwidthPlugin is what the CNI bandwidth plugin sets up for a pod, on
// the target link, the host-side veth: an ingress limit (traffic towards
// the pod) is a tbf at the veth's root; an egress limit (traffic from the
// pod) is an ingress qdisc on the veth whose match-all u32 filter redirects
// with mirred to an ifb device, with a tbf at the ifb's root. Both tbfs use
// limit = rate × 25 ms + burst. Rates are bits/s, bursts bytes; a zero rate
// with zero burst means no limit in that direction.
type BandwidthPlugin struct {
	IngressRate  uint64
	IngressBurst uint32
	EgressRate   uint64
	EgressBurst  uint32
	// IfbName names the ifb device; "" derives "bwp" + a hash of the link
	// name, as the plugin does from the container ID.
	IfbName string
}

// Kind implements Setup.
func (BandwidthPlugin) Kind() string { return "bandwidth-plugin" }

// Validate implements Setup.
func (b BandwidthPlugin) Validate() error {
	check := func(dir string, rate uint64, burst uint32) error {
		switch {
		case rate == 0 && burst != 0:
			return invalid(dir+" rate", "rate 0 with a burst of %d bytes: a burst needs a rate", burst)
		case rate != 0 && burst == 0:
			return invalid(dir+" burst", "0 bytes: a rate needs a burst")
		case rate != 0:
			if err := validRate(dir+" rate", rate); err != nil {
				return err
			}
			_, err := tbfQdisc(netlink.QdiscAttrs{}, rate, burst, CNILimitBytes(rate, burst))
			return err
		}
		return nil
	}
	if err := check("ingress", b.IngressRate, b.IngressBurst); err != nil {
		return err
	}
	if err := check("egress", b.EgressRate, b.EgressBurst); err != nil {
		return err
	}
	if b.IngressRate == 0 && b.EgressRate == 0 {
		return invalid("rate", "rate 0 in both directions: nothing to limit")
	}
	if b.IfbName != "" && (len(b.IfbName) > unix.IFNAMSIZ-1 || len(b.IfbName) < 4 || b.IfbName[:3] != "bwp") {
		return invalid("ifb name", "%q: want bwp followed by up to 12 characters", b.IfbName)
	}
	return nil
}

// Needs implements Setup.
func (b BandwidthPlugin) Needs() []string {
	if b.EgressRate == 0 {
		return []string{FeatureTBF}
	}
	return []string{FeatureTBF, FeatureIngress, FeatureU32, FeatureMirred, FeatureIfb}
}

func (b BandwidthPlugin) ifbName(link netlink.Link) string {
	if b.IfbName != "" {
		return b.IfbName
	}
	sum := sha1.Sum([]byte(link.Attrs().Name))
	return "bwp" + hex.EncodeToString(sum[:])[:12]
}

func (b BandwidthPlugin) apply(c *conn, link netlink.Link) error {
	idx := link.Attrs().Index
	if b.IngressRate != 0 {
		if err := deleteRoot(c, link); err != nil {
			return err
		}
		if err := addTBF(c, idx, b.IngressRate, b.IngressBurst, CNILimitBytes(b.IngressRate, b.IngressBurst)); err != nil {
			return fmt.Errorf("ingress limit: %w", err)
		}
	}
	if b.EgressRate == 0 {
		return nil
	}
	name := b.ifbName(link)
	if err := c.h.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, Flags: net.FlagUp, MTU: link.Attrs().MTU}}); err != nil {
		return fmt.Errorf("add ifb %s: %w", name, err)
	}
	ifb, err := c.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find ifb %s: %w", name, err)
	}
	if err := c.h.LinkSetUp(ifb); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	if err := addIngress(c, link); err != nil {
		return err
	}
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
		ClassId:     netlink.MakeHandle(1, 1),
		// Redirect and stop (TC_ACT_STOLEN), as the plugin does with
		// netlink.NewMirredAction; with the zero action (pass) the packet
		// would also go on unshaped and the ifb would only see copies.
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := c.h.FilterAdd(f); err != nil {
		return fmt.Errorf("add u32 mirred filter to %s: %w", name, err)
	}
	if err := addTBF(c, ifb.Attrs().Index, b.EgressRate, b.EgressBurst, CNILimitBytes(b.EgressRate, b.EgressBurst)); err != nil {
		return fmt.Errorf("egress limit on %s: %w", name, err)
	}
	return nil
}

func (b BandwidthPlugin) remove(c *conn, link netlink.Link) error {
	var errs []error
	errs = append(errs, deleteRoot(c, link, FeatureTBF), deleteIngress(c, link))
	name := b.ifbName(link)
	// Only an ifb of that name is ours; never delete another kind of device.
	if ifb, err := c.h.LinkByName(name); err == nil && ifb.Type() == "ifb" {
		if err := c.h.LinkDel(ifb); err != nil {
			errs = append(errs, fmt.Errorf("delete ifb %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
