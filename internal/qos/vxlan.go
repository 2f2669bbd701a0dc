package qos

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TOSInherit is the VXLAN outer TOS value meaning "copy the inner
// packet's TOS" (ip link ... tos inherit).
const TOSInherit = 1

// VXLANTOS lists the vxlan devices in namespace nsPath with their outer
// TOS setting (0: the underlay sees TOS 0; TOSInherit: copied from the
// inner packet).
func VXLANTOS(nsPath string) (map[string]uint8, error) {
	links, err := listLinks(nsPath)
	if err != nil {
		return nil, err
	}
	out := map[string]uint8{}
	for _, l := range links {
		if v, ok := l.(*netlink.Vxlan); ok {
			out[v.Name] = uint8(v.TOS)
		}
	}
	return out, nil
}

// VXLANMetadata lists the metadata-mode VXLAN devices in namespace
// nsPath, by name.
func VXLANMetadata(nsPath string) ([]string, error) {
	links, err := listLinks(nsPath)
	if err != nil {
		return nil, err
	}
	return metadataDevices(links), nil
}

// listLinks lists the links of namespace nsPath.
func listLinks(nsPath string) ([]netlink.Link, error) {
	c, err := openConn(nsPath)
	if err != nil {
		return nil, err
	}
	defer c.close()
	links, err := c.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	return links, nil
}

// metadataDevices names the metadata-mode VXLAN devices among links.
func metadataDevices(links []netlink.Link) []string {
	var out []string
	for _, l := range links {
		if v, ok := l.(*netlink.Vxlan); ok && v.FlowBased {
			out = append(out, v.Name)
		}
	}
	return out
}

// SetVXLANTOS sets the outer TOS of the vxlan device dev in nsPath (0 or
// TOSInherit, or a fixed TOS byte). Only that attribute is sent, so the
// device keeps everything else (its VNI, port, FDB).
func SetVXLANTOS(nsPath, dev string, tos uint8) error {
	c, err := openConn(nsPath)
	if err != nil {
		return err
	}
	defer c.close()
	l, err := c.h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("find %s: %w", dev, err)
	}
	return setVXLANTOS(c, l, tos)
}

func setVXLANTOS(c *conn, l netlink.Link, tos uint8) error {
	dev := l.Attrs().Name
	if l.Type() != "vxlan" {
		return fmt.Errorf("%s is a %s device, not vxlan", dev, l.Type())
	}
	req := c.request(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(l.Attrs().Index)
	req.AddData(msg)
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("vxlan"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(nl.IFLA_VXLAN_TOS, nl.Uint8Attr(tos))
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("set tos %d on %s: %w", tos, dev, err)
	}
	return nil
}
