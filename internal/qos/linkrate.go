package qos

import (
	"runtime"
	"unsafe"

	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// Rater is a setup whose rates are bounded by the link's own rate: a
// bottleneck or shaper above what the link carries never holds a queue.
type Rater interface {
	// MaxRateBps is the highest rate the setup configures, in bits/s.
	MaxRateBps() uint64
}

// MaxRateBps implements Rater.
func (p HTBPriority) MaxRateBps() uint64 { return p.Rate }

// MaxRateBps implements Rater.
func (t TBF) MaxRateBps() uint64 { return t.Rate }

// MaxRateBps implements Rater.
func (b Bottleneck) MaxRateBps() uint64 { return b.Rate }

// MaxRateBps implements Rater.
func (b BandwidthPlugin) MaxRateBps() uint64 { return max(b.IngressRate, b.EgressRate) }

// MaxRateBps implements Rater.
func (p Police) MaxRateBps() uint64 { return p.Rate }

// checkLinkRate rejects a setup whose rate is above the link's: the rate
// the caller gave in t.RateBps, or else the speed the driver reports
// (placeholders such as veth's nominal 10 Gbit/s are not taken as a rate).
func checkLinkRate(c *conn, t Target, link netlink.Link, s Setup) error {
	r, ok := s.(Rater)
	if !ok {
		return nil
	}
	linkRate, source := t.RateBps, "given"
	if linkRate == 0 {
		linkRate, source = linkSpeed(c, link.Attrs().Name), "reported by the driver"
	}
	if linkRate == 0 || r.MaxRateBps() <= linkRate {
		return nil
	}
	return invalid("rate", "%s is above the link's rate %s (%s): the qdisc would never hold a queue, so it would not be the bottleneck",
		FormatBps(r.MaxRateBps()), FormatBps(linkRate), source)
}

// FormatBps writes a rate in bits/s with a decimal unit ("1 Gbit/s",
// "12.5 Mbit/s").
func FormatBps(v uint64) string { return qosspec.FormatBps(v) }

// placeholderSpeed lists drivers whose reported speed is nominal.
var placeholderSpeed = map[string]bool{"veth": true, "tun": true, "dummy": true, "ifb": true, "bridge": true, "vxlan": true}

// ethtoolCmd is struct ethtool_cmd (ETHTOOL_GSET), enough for the speed.
type ethtoolCmd struct {
	Cmd           uint32
	Supported     uint32
	Advertising   uint32
	Speed         uint16
	Duplex        uint8
	Port          uint8
	PhyAddress    uint8
	Transceiver   uint8
	Autoneg       uint8
	MdioSupport   uint8
	Maxtxpkt      uint32
	Maxrxpkt      uint32
	SpeedHi       uint16
	EthTpMdix     uint8
	EthTpMdixCtrl uint8
	LpAdvertising uint32
	Reserved      [2]uint32
}

type ifreqPtr struct {
	Name [unix.IFNAMSIZ]byte
	Data unsafe.Pointer
	_    [16]byte
}

// linkSpeed returns the driver's link speed in bits/s, or 0 when the
// driver reports none or a placeholder.
func linkSpeed(c *conn, name string) uint64 {
	fd, err := socketIn(c.ns)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if info, err := unix.IoctlGetEthtoolDrvinfo(fd, name); err != nil || placeholderSpeed[unix.ByteSliceToString(info.Driver[:])] {
		return 0
	}
	cmd := ethtoolCmd{Cmd: unix.ETHTOOL_GSET}
	var ifr ifreqPtr
	copy(ifr.Name[:], name)
	ifr.Data = unsafe.Pointer(&cmd)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return 0
	}
	runtime.KeepAlive(&cmd)
	mbps := uint32(cmd.SpeedHi)<<16 | uint32(cmd.Speed)
	if mbps == 0 || mbps == 0xffff || mbps == 0xffffffff {
		return 0
	}
	return uint64(mbps) * 1_000_000
}

// socketIn opens a datagram socket in ns (netns.None(): the caller's).
func socketIn(ns netns.NsHandle) (int, error) {
	if !ns.IsOpen() {
		return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}
	fd := -1
	err := nsthread.Do(ns, "", func() error {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fd = s
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}
