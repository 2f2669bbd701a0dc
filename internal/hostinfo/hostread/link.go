package hostread

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/cnperf/cnperf/internal/ethtool"
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
// network namespace.
func Offload(dev string) (map[string]bool, error) { return ethtool.Get(dev) }
