package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// netlab is the run's network: a bridge in the bench's namespace holding
// the server's address (SUBNET.1/24), and one namespace per agent joined
// to it by a veth (the agent on SUBNET.10+i). A partition takes the
// agent's bridge port down: its packets and those to it are dropped
// silently, as on a lost link, while its process runs on.
type netlab struct {
	subnet string // the first three octets
	n      int
}

const (
	bridgeName = "cnchaos0"
	nsPrefix   = "cnperf-chaos-"
)

func (l *netlab) serverIP() string     { return l.subnet + ".1" }
func (l *netlab) agentIP(i int) string { return l.subnet + "." + strconv.Itoa(10+i) }
func (l *netlab) ns(i int) string      { return nsPrefix + strconv.Itoa(i) }
func (l *netlab) hostVeth(i int) string {
	return "cnch" + strconv.Itoa(i) + "h"
}
func (l *netlab) nsVeth(i int) string { return "cnch" + strconv.Itoa(i) + "a" }

// ip runs ip(8) with args, returning its error with its output.
func ip(args ...string) error {
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// up makes the bridge and the namespaces. The subnet must be unused here.
func (l *netlab) up() error {
	if err := l.subnetFree(); err != nil {
		return err
	}
	steps := [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", l.serverIP() + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	}
	for i := range l.n {
		ns := l.ns(i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", l.hostVeth(i), "type", "veth", "peer", "name", l.nsVeth(i)},
			[]string{"link", "set", l.nsVeth(i), "netns", ns},
			[]string{"link", "set", l.hostVeth(i), "master", bridgeName, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "addr", "add", l.agentIP(i) + "/24", "dev", l.nsVeth(i)},
			[]string{"-n", ns, "link", "set", l.nsVeth(i), "up"},
			[]string{"-n", ns, "route", "add", "default", "via", l.serverIP()},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	return nil
}

// subnetFree refuses a subnet another interface here already uses.
func (l *netlab) subnetFree() error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), l.subnet+".") {
			return fmt.Errorf("-subnet %s.0/24 is in use here (%s): pick another", l.subnet, a)
		}
	}
	return nil
}

// partition takes agent i's bridge port down (on) or up again.
func (l *netlab) partition(i int, on bool) error {
	state := "up"
	if on {
		state = "down"
	}
	return ip("link", "set", l.hostVeth(i), state)
}

// down removes the veths (deleting the bridge's end takes the pair at
// once; a namespace's are removed in the kernel's own time), the
// namespaces and the bridge.
func (l *netlab) down() {
	for i := range l.n {
		if _, err := net.InterfaceByName(l.hostVeth(i)); err == nil {
			if err := ip("link", "del", l.hostVeth(i)); err != nil {
				fmt.Fprintln(os.Stderr, "bench-chaos: cleanup:", err)
			}
		}
		if _, err := os.Stat("/run/netns/" + l.ns(i)); err != nil {
			continue // never made
		}
		if err := ip("netns", "del", l.ns(i)); err != nil {
			fmt.Fprintln(os.Stderr, "bench-chaos: cleanup:", err)
		}
	}
	if err := ip("link", "del", bridgeName); err != nil {
		fmt.Fprintln(os.Stderr, "bench-chaos: cleanup:", err)
	}
}

// cleanStale removes what a killed earlier run left (the bench lock
// keeps two runs apart, so anything of these names is a leftover).
func (l *netlab) cleanStale() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
				_ = ip("netns", "del", f[0])
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if i.Name == bridgeName || staleVeth.MatchString(i.Name) {
				_ = ip("link", "del", i.Name)
			}
		}
	}
}

// staleVeth matches the bridge's ends of the agents' veths.
var staleVeth = regexp.MustCompile(`^cnch[0-9]+h$`)

// mountStore mounts a tmpfs of mb MiB at dir: the store's filesystem,
// small enough to fill.
func mountStore(dir string, mb int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("cnperf-chaos", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", mb)); err != nil {
		return fmt.Errorf("mount a %d MiB tmpfs at %s: %w", mb, dir, err)
	}
	return nil
}

func unmountStore(dir string) error {
	var err error
	for range 20 { // the killed server's files may take a moment to close
		if err = syscall.Unmount(dir, 0); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	if derr := syscall.Unmount(dir, syscall.MNT_DETACH); derr == nil {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", dir, err)
}

// freePort returns a TCP port free on host.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
