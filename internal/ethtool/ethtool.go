// Package ethtool reads and sets a network device's segmentation and
// receive offloads (ethtool's tso, gso, gro) through the SIOCETHTOOL
// ioctl, in the calling thread's network namespace. It is what cnperf
// needs of ethtool without running it.
package ethtool

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offloads cnperf reads and sets.
const (
	TSO = "tso" // TCP segmentation offload
	GSO = "gso" // generic segmentation offload
	GRO = "gro" // generic receive offload
)

var getCmd = map[string]uint32{TSO: unix.ETHTOOL_GTSO, GSO: unix.ETHTOOL_GGSO, GRO: unix.ETHTOOL_GGRO}
var setCmd = map[string]uint32{TSO: unix.ETHTOOL_STSO, GSO: unix.ETHTOOL_SGSO, GRO: unix.ETHTOOL_SGRO}

// Get reads dev's tso, gso and gro; a device that does not answer one
// leaves it out (an error only when it answers none).
func Get(dev string) (map[string]bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("offload of %s: socket: %w", dev, err)
	}
	defer unix.Close(fd)
	out := map[string]bool{}
	var firstErr error
	for _, name := range []string{TSO, GSO, GRO} {
		v, err := value(fd, dev, getCmd[name], 0)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("offload %s of %s: %w", name, dev, err)
			}
			continue
		}
		out[name] = v != 0
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

// Set turns the named offloads of dev on or off.
func Set(dev string, offloads map[string]bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set offload of %s: socket: %w", dev, err)
	}
	defer unix.Close(fd)
	for name, on := range offloads {
		cmd, ok := setCmd[name]
		if !ok {
			return fmt.Errorf("set offload of %s: unknown offload %q (want tso, gso or gro)", dev, name)
		}
		var data uint32
		if on {
			data = 1
		}
		if _, err := value(fd, dev, cmd, data); err != nil {
			return fmt.Errorf("set offload %s of %s to %v: %w", name, dev, on, err)
		}
	}
	return nil
}

// Link reads whether dev has a link (ETHTOOL_GLINK). Asking settles a
// link state change the kernel's link watcher has not handled yet
// (ethtool_op_get_link syncs it): the device's operational state and, on
// carrier, its transmit queue are brought up to date at once instead of
// up to a second later.
func Link(dev string) (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("link of %s: socket: %w", dev, err)
	}
	defer unix.Close(fd)
	v, err := value(fd, dev, unix.ETHTOOL_GLINK, 0)
	if err != nil {
		return false, fmt.Errorf("link of %s: %w", dev, err)
	}
	return v != 0, nil
}

// value runs one ethtool command on a struct ethtool_value and returns
// its data.
func value(fd int, dev string, cmd, data uint32) (uint32, error) {
	val := struct{ cmd, data uint32 }{cmd: cmd, data: data}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer // typed, so a moved stack is followed
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}
	if len(dev) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("interface name %q too long", dev)
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(&val)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
	if errno != 0 {
		return 0, errno
	}
	return val.data, nil
}
