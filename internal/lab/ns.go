package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// netnsDir is where named namespaces are bind-mounted (as by ip netns).
const netnsDir = "/var/run/netns"

// sysctl is one /proc/sys file and its value, written inside a namespace.
type sysctl struct{ path, value string }

var (
	// Pods and nodes carry IPv4 only; IPv6 off keeps link-local chatter
	// (router solicitations, DAD) off the lab's links.
	sysctlNoIPv6 = []sysctl{
		{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "1"},
		{"/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"},
	}
	sysctlForward = sysctl{"/proc/sys/net/ipv4/ip_forward", "1"}
)

// nsHandles are an open namespace and a netlink handle inside it.
type nsHandles struct {
	name string
	ns   netns.NsHandle
	nl   *netlink.Handle
}

func (h *nsHandles) close() {
	if h == nil {
		return
	}
	if h.nl != nil {
		h.nl.Close()
	}
	_ = h.ns.Close()
}

// createNS makes a named namespace, writes the sysctls inside it and opens
// a netlink socket in it, all on one locked thread that is switched back
// before it is released.
func createNS(name string, sysctls []sysctl) (*nsHandles, error) {
	var nl *netlink.Handle
	ns, err := nsthread.Create(name, func() error {
		for _, s := range sysctls {
			if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", s.path, name, err)
			}
		}
		var err error
		if nl, err = netlink.NewHandle(); err != nil {
			return fmt.Errorf("netlink socket in %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		if nl != nil {
			nl.Close()
		}
		return nil, err
	}
	return &nsHandles{name: name, ns: ns, nl: nl}, nil
}

// openNS opens an existing named namespace with a netlink handle in it.
func openNS(name string) (*nsHandles, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		_ = ns.Close()
		return nil, fmt.Errorf("netlink handle in %s: %w", name, err)
	}
	return &nsHandles{name: name, ns: ns, nl: nl}, nil
}

// ensureNetnsDir makes netnsDir a mount point with shared propagation, as
// ip netns add does, before the lab mounts namespaces in it. Otherwise an
// ip netns add that runs while the lab is up bind-mounts the directory over
// itself and hides the lab's mounts beneath: they can then neither be
// unmounted nor removed by their path. When netnsDir is already a mount
// point this only (re)sets its propagation.
func ensureNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", netnsDir, err)
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s shared: %w", netnsDir, err)
	}
	// Not a mount point yet: bind it onto itself, then share it.
	if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", netnsDir, err)
	}
	if err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", netnsDir, err)
	}
	return nil
}

// deleteNS unmounts and removes a named namespace; the kernel frees it and
// its devices once nothing holds it. A missing one is not an error.
func deleteNS(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}

// leftoverNamespaces lists the named namespaces with the lab's prefix.
func leftoverNamespaces(lab string) []string {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return nil
	}
	pre := Prefix(lab)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), pre) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// nsExists says whether the named namespace is mounted.
func nsExists(name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(netnsDir, name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Do runs fn on a thread switched into the lab namespace nsName and
// switches back. Sockets fn opens belong to that namespace, wherever they
// are used later; fn must not start goroutines that expect to be in it.
func Do(nsName string, fn func() error) error {
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsName, err)
	}
	defer ns.Close()
	return nsthread.Do(ns, nsName, fn)
}

// CheckPrivileges returns one plain line when the process cannot build a
// lab (it needs CAP_NET_ADMIN and CAP_SYS_ADMIN).
func CheckPrivileges() error {
	const capNetAdmin, capSysAdmin = 12, 21
	data, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				var eff uint64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &eff); err == nil {
					if eff&(1<<capNetAdmin) != 0 && eff&(1<<capSysAdmin) != 0 {
						return nil
					}
				}
			}
		}
	}
	return errors.New("the lab needs CAP_NET_ADMIN (run as root or with sudo)")
}
