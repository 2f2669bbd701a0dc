package qos

import (
	"fmt"
	"math"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Police drops traffic arriving on the link above Rate: an ingress qdisc
// with a match-all u32 filter carrying the police action. Kernels without
// act_police (as this project's lab kernel) make Apply return an
// *UnsupportedError.
type Police struct {
	Rate       uint64 // bits/s
	BurstBytes uint32
}

// Kind implements Setup.
func (Police) Kind() string { return "police" }

// Validate implements Setup.
func (p Police) Validate() error {
	if err := validRate("rate", p.Rate); err != nil {
		return err
	}
	if p.Rate/8 > math.MaxUint32 {
		return invalid("rate", "%d bit/s is above the police action's 32-bit byte rate", p.Rate)
	}
	if p.BurstBytes == 0 {
		return invalid("burst", "0 bytes: give a burst of at least one packet")
	}
	return nil
}

// Needs implements Setup.
func (Police) Needs() []string { return []string{FeatureIngress, FeatureU32, FeaturePolice} }

func (p Police) apply(c *conn, link netlink.Link) error {
	if err := addIngress(c, link); err != nil {
		return err
	}
	pa := netlink.NewPoliceAction()
	pa.Rate = uint32(p.Rate / 8)
	pa.Burst = p.BurstBytes
	pa.Mtu = 64 * 1024
	pa.ExceedAction = netlink.TC_POLICE_SHOT
	pa.NotExceedAction = netlink.TC_POLICE_OK
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
		Actions:     []netlink.Action{pa},
	}
	if err := c.h.FilterAdd(f); err != nil {
		return fmt.Errorf("add u32 police filter: %w", err)
	}
	return nil
}

func (p Police) remove(c *conn, link netlink.Link) error {
	return deleteIngress(c, link)
}
