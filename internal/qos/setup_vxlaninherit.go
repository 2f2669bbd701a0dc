package qos

import (
	"errors"
	"fmt"
	"sort"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/qosspec"
)

// VXLANInherit makes every VXLAN device of the namespace copy the inner
// packet's TOS to the outer header (tos inherit), the remedy for a DSCP
// mark lost at encapsulation, and restores each device's own setting on
// removal. A node with a metadata-mode VXLAN device (Cilium's
// cilium_vxlan) is refused before anything is changed: tos inherit does
// nothing there (qosspec.MetadataTunnelWhy). It touches no qdisc: the link it is applied "on" only names
// the namespace. It keeps what it changed between apply and remove, so
// the same value must be given to both (a pointer, as Build returns).
type VXLANInherit struct {
	changed map[string]uint8 // device name -> its TOS before
}

// Kind implements Setup.
func (*VXLANInherit) Kind() string { return "vxlan-inherit" }

// Validate implements Setup.
func (*VXLANInherit) Validate() error { return nil }

// Needs implements Setup: no qdisc, classifier or action.
func (*VXLANInherit) Needs() []string { return nil }

func (v *VXLANInherit) apply(c *conn, _ netlink.Link) error {
	links, err := c.h.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	if md := metadataDevices(links); len(md) > 0 {
		return fmt.Errorf("vxlan-inherit refused: %s", qosspec.MetadataTunnelWhy(md...))
	}
	v.changed = map[string]uint8{}
	found := 0
	for _, l := range links {
		x, ok := l.(*netlink.Vxlan)
		if !ok {
			continue
		}
		found++
		if x.TOS == TOSInherit {
			continue
		}
		if err := setVXLANTOS(c, l, TOSInherit); err != nil {
			return errors.Join(err, v.remove(c, nil))
		}
		v.changed[x.Name] = uint8(x.TOS)
	}
	if found == 0 {
		return errors.New("vxlan-inherit: the node has no VXLAN device (its CNI does not encapsulate in VXLAN here)")
	}
	return nil
}

// Changed names the devices apply set to inherit, with their TOS before.
func (v *VXLANInherit) Changed() map[string]uint8 { return v.changed }

func (v *VXLANInherit) remove(c *conn, _ netlink.Link) error {
	names := make([]string, 0, len(v.changed))
	for n := range v.changed {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		l, err := c.h.LinkByName(n)
		if err != nil {
			continue // gone with its CNI: nothing to restore
		}
		if err := setVXLANTOS(c, l, v.changed[n]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(v.changed, n)
	}
	return errors.Join(errs...)
}
