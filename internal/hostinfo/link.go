package hostinfo

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CongestionControl is the TCP congestion control of the calling
// thread's network namespace (net.ipv4.tcp_congestion_control is per
// namespace).
func CongestionControl() (string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "", fmt.Errorf("congestion control: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// LinkMTU is the MTU of the interface named dev in the calling thread's
// network namespace.
func LinkMTU(dev string) (int, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return 0, fmt.Errorf("mtu of %s: %w", dev, err)
	}
	return ifc.MTU, nil
}

// Offload reads dev's TCP segmentation, generic segmentation and generic
// receive offload (ethtool's tso, gso, gro) in the calling thread's
// network namespace. A device that does not answer one of them leaves it
// out.
func Offload(dev string) (map[string]bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("offload of %s: socket: %w", dev, err)
	}
	defer unix.Close(fd)
	out := map[string]bool{}
	var firstErr error
	for name, cmd := range map[string]uint32{"tso": unix.ETHTOOL_GTSO, "gso": unix.ETHTOOL_GGSO, "gro": unix.ETHTOOL_GGRO} {
		on, err := ethtoolValue(fd, dev, cmd)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("offload %s of %s: %w", name, dev, err)
			}
			continue
		}
		out[name] = on
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

// ethtoolValue runs one ethtool "get value" command (struct
// ethtool_value) on dev.
func ethtoolValue(fd int, dev string, cmd uint32) (bool, error) {
	val := struct{ cmd, data uint32 }{cmd: cmd}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer // typed, so a moved stack is followed
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}
	if len(dev) >= unix.IFNAMSIZ {
		return false, fmt.Errorf("interface name %q too long", dev)
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(&val)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
	if errno != 0 {
		return false, errno
	}
	return val.data != 0, nil
}
