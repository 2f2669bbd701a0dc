// Package lab builds an emulated cluster's network on one Linux machine from
// network namespaces: an underlay namespace with a bridge that the nodes
// meet on (10.170.0.0/24), one namespace per node with a bridge cni0 for its
// pod CIDR (10.244.K.0/24) and forwarding on, and one namespace per pod with
// eth0 on its node's bridge. Nodes reach each other's pods through a backend:
// host-gw (routes via the node IPs, like Flannel host-gw and Calico direct) or
// vxlan (a flannel.1-like VTEP per node with static FDB and neighbour entries).
//
// Everything is configured through netlink (vishvananda/netlink and netns),
// never by running ip or tc. What a lab made is recorded in a JSON state file
// so Down removes exactly that; Down also finds leftovers by the lab's
// namespace prefix ("cnl-NAME-"), so it works after the process that made the
// lab was killed. Up removes everything it made when it fails half-way.
//
// The package needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root); CheckPrivileges
// says so in one line when they are missing.
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Backend names.
const (
	BackendHostGW = "host-gw"
	BackendVXLAN  = "vxlan"
)

// Defaults.
const (
	DefaultName        = "lab"
	DefaultNodes       = 2
	DefaultPodsPerNode = 2
	DefaultMTU         = 1500
	DefaultStateDir    = "/run/cnperf/lab"
	// DefaultServerPort is where the lab expects the cnperf server to listen
	// on the underlay's address.
	DefaultServerPort = 8080
	// VXLANPort is the Linux/Flannel VXLAN UDP port.
	VXLANPort = 8472
	// VXLANOverhead is what VXLAN over IPv4 adds to a frame (outer IPv4 20,
	// UDP 8, VXLAN 8, inner Ethernet 14).
	VXLANOverhead = 50
)

var (
	defaultPodCIDR      = netip.MustParsePrefix("10.244.0.0/16")
	defaultUnderlayCIDR = netip.MustParsePrefix("10.170.0.0/24")
	nameRE              = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
)

// Config describes a lab. The zero value of each field means its default.
type Config struct {
	// Name tells labs apart: lowercase letters and digits, starting with a
	// letter, at most 12 characters. Default "lab".
	Name string `json:"name"`
	// Nodes is the number of nodes (required, at least 1).
	Nodes int `json:"nodes"`
	// PodsPerNode is the number of pods on each node (0 is allowed).
	PodsPerNode int `json:"pods_per_node"`
	// Backend is "host-gw" (default) or "vxlan".
	Backend string `json:"backend"`
	// VXLANInheritTOS makes the VXLAN outer header copy the inner TOS
	// (ip link ... tos inherit); without it the underlay sees TOS 0.
	VXLANInheritTOS bool `json:"vxlan_inherit_tos,omitempty"`
	// UnderlayRateBps, when above 0, limits each node's underlay link
	// (node side egress) with tbf, like a NIC of that speed.
	UnderlayRateBps uint64 `json:"underlay_rate_bps,omitempty"`
	// NodeUnderlayRates limits single nodes' underlay links (by node name,
	// "n3"), in both directions, like a slower NIC on that node; it takes
	// precedence over UnderlayRateBps for the nodes it names.
	NodeUnderlayRates map[string]uint64 `json:"node_underlay_rates,omitempty"`
	// UnderlaySegmentation is where the node underlay segments TCP and
	// UDP batches: "host" (the default: veths keep GSO and TSO, so 64 KB
	// batches cross the underlay as one packet) or "nic" (TSO and GSO off
	// on both ends of every node's underlay link, so the node segments
	// before its "wire", as a NIC does: every packet on the underlay is
	// MTU-sized and pays its per-packet costs, VXLAN encapsulation
	// included). See docs/lab.md.
	UnderlaySegmentation string `json:"underlay_segmentation,omitempty"`
	// MTU of the underlay links and bridges (default 1500). Pods get it on
	// host-gw and MTU-50 on vxlan.
	MTU int `json:"mtu"`
	// PodCIDR holds one /24 per node (node K gets the K-th). Default
	// 10.244.0.0/16.
	PodCIDR netip.Prefix `json:"pod_cidr"`
	// UnderlayCIDR is the nodes' network: the underlay gets host 1, node K
	// host 10+K. Default 10.170.0.0/24.
	UnderlayCIDR netip.Prefix `json:"underlay_cidr"`
	// StateDir holds the state file NAME.json. Default /run/cnperf/lab.
	StateDir string `json:"-"`

	// failAt, set by tests, makes Up fail at the named step.
	failAt string
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Backend == "" {
		c.Backend = BackendHostGW
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if !c.PodCIDR.IsValid() {
		c.PodCIDR = defaultPodCIDR
	}
	if !c.UnderlayCIDR.IsValid() {
		c.UnderlayCIDR = defaultUnderlayCIDR
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	return c
}

// Rate bounds for the underlay limit.
const (
	minUnderlayRate = 1_000_000         // 1 Mbit/s: below it the burst dominates
	maxUnderlayRate = 1_000_000_000_000 // 1 Tbit/s
)

// Validate checks c (after defaults) without touching the system, except
// that backends the lab knows only by name are looked for in the kernel.
func (c Config) Validate() error {
	c = c.withDefaults()
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("lab name %q: want lowercase letters and digits, starting with a letter, at most 12 characters", c.Name)
	}
	if c.Nodes < 1 {
		return fmt.Errorf("nodes %d: a lab needs at least 1 node", c.Nodes)
	}
	if c.PodsPerNode < 0 {
		return fmt.Errorf("pods per node %d: must not be negative", c.PodsPerNode)
	}
	if c.PodsPerNode > maxPodsPerNode {
		return fmt.Errorf("pods per node %d: at most %d fit in a node's /24", c.PodsPerNode, maxPodsPerNode)
	}
	if err := checkBackend(c.Backend); err != nil {
		return err
	}
	if c.VXLANInheritTOS && c.Backend != BackendVXLAN {
		return fmt.Errorf("vxlan-inherit-tos needs the vxlan backend, not %s", c.Backend)
	}
	for name, r := range c.NodeUnderlayRates {
		k, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
		if !strings.HasPrefix(name, "n") || err != nil || k < 1 || k > c.Nodes {
			return fmt.Errorf("node underlay rate for %q: no such node (nodes are n1 to n%d)", name, c.Nodes)
		}
		if r < minUnderlayRate || r > maxUnderlayRate {
			return fmt.Errorf("node underlay rate %d bit/s for %s: want 1 Mbit/s to 1 Tbit/s", r, name)
		}
	}
	if c.UnderlaySegmentation != "" && c.UnderlaySegmentation != SegmentHost && c.UnderlaySegmentation != SegmentNIC {
		return fmt.Errorf("underlay segmentation %q: want %s or %s", c.UnderlaySegmentation, SegmentHost, SegmentNIC)
	}
	if c.MTU < 1280 || c.MTU > 9000 {
		return fmt.Errorf("mtu %d: want 1280 to 9000", c.MTU)
	}
	if c.UnderlayRateBps != 0 && (c.UnderlayRateBps < minUnderlayRate || c.UnderlayRateBps > maxUnderlayRate) {
		return fmt.Errorf("underlay rate %d bit/s: want 1 Mbit/s to 1 Tbit/s (or 0 for no limit)", c.UnderlayRateBps)
	}
	return checkCIDRs(c)
}

// Underlay segmentation settings (Config.UnderlaySegmentation).
const (
	SegmentHost = "host"
	SegmentNIC  = "nic"
)

// Underlay is the namespace the nodes meet in.
type Underlay struct {
	NS     string       `json:"ns"`
	Bridge string       `json:"bridge"`
	Addr   netip.Prefix `json:"addr"` // the underlay's own address, for the server
	// ServerAddr is where the lab's cnperf server is expected to listen.
	ServerAddr string `json:"server_addr"`
}

// Node is one emulated node.
type Node struct {
	Name    string       `json:"name"` // n1, n2, ...
	Index   int          `json:"index"`
	NS      string       `json:"ns"`
	IP      netip.Prefix `json:"ip"`       // on eth0, in the underlay
	PodCIDR netip.Prefix `json:"pod_cidr"` // 10.244.K.0/24
	Gateway netip.Addr   `json:"gateway"`  // cni0's address, the pods' default route
	// VTEP is the vxlan device (empty on host-gw).
	VTEP *VTEP `json:"vtep,omitempty"`
}

// VTEP is a node's vxlan device.
type VTEP struct {
	Dev  string     `json:"dev"`
	Addr netip.Addr `json:"addr"` // 10.244.K.0
	MAC  string     `json:"mac"`
	MTU  int        `json:"mtu"`
}

// Pod is one emulated pod.
type Pod struct {
	Name string       `json:"name"` // n1-p1
	Node string       `json:"node"`
	NS   string       `json:"ns"`
	IP   netip.Prefix `json:"ip"`
	MTU  int          `json:"mtu"`
}

// Lab is a lab's description and recorded state; it is what the state file
// holds.
type Lab struct {
	Name       string          `json:"name"`
	Config     Config          `json:"config"`
	Phase      string          `json:"phase"` // "creating" or "up"
	CreatedAt  time.Time       `json:"created_at"`
	Underlay   Underlay        `json:"underlay"`
	Nodes      []Node          `json:"nodes"`
	Pods       []Pod           `json:"pods"`
	Namespaces []string        `json:"namespaces"`
	Devices    []Device        `json:"devices"`
	Processes  []ProcessRecord `json:"processes"`
	// Cnperf is the control plane StartCnperf started, if any.
	Cnperf *CnperfRecord `json:"cnperf,omitempty"`

	stateDir string
	log      *slog.Logger
	procs    *procTable
}

// Device is a device the lab made, for the record.
type Device struct {
	NS   string `json:"ns"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// Phases.
const (
	PhaseCreating = "creating"
	PhaseUp       = "up"
)

// ErrNotFound says a lab does not exist (no state file, no leftovers).
var ErrNotFound = errors.New("lab not found")

// Up validates cfg and builds the lab. On failure everything made so far is
// removed before the error is returned.
func Up(ctx context.Context, cfg Config, log *slog.Logger) (*Lab, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := ensureNetnsDir(); err != nil {
		return nil, err
	}
	if left := leftoverNamespaces(cfg.Name); len(left) > 0 {
		return nil, fmt.Errorf("lab %q already exists or left %d namespaces behind (%s ...): run cnperf lab down --name %s", cfg.Name, len(left), left[0], cfg.Name)
	}
	l := plan(cfg)
	l.stateDir = cfg.StateDir
	l.log = log
	l.procs = newProcTable()
	// Creating the state file exclusively claims the name.
	if err := l.create(); err != nil {
		return nil, err
	}
	start := time.Now()
	err := build(ctx, l)
	if err == nil {
		err = waitLinksCarry(ctx, l)
	}
	if err != nil {
		_, derr := down(ctx, cfg.Name, cfg.StateDir, log, l)
		if derr != nil {
			return nil, errors.Join(fmt.Errorf("lab up %s: %w", cfg.Name, err), fmt.Errorf("remove half-made lab: %w", derr))
		}
		return nil, fmt.Errorf("lab up %s: %w (everything made was removed)", cfg.Name, err)
	}
	l.Phase = PhaseUp
	if err := l.save(); err != nil {
		_, derr := down(ctx, cfg.Name, cfg.StateDir, log, l)
		return nil, errors.Join(err, derr)
	}
	log.Info("lab up", "lab", cfg.Name, "backend", cfg.Backend, "nodes", cfg.Nodes,
		"pods", len(l.Pods), "elapsed", time.Since(start).Round(time.Millisecond))
	return l, nil
}

// Open loads a lab's state from stateDir ("" means the default).
func Open(name, stateDir string) (*Lab, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("lab name %q: want lowercase letters and digits, starting with a letter, at most 12 characters", name)
	}
	l, err := load(stateFile(stateDir, name))
	if err != nil {
		return nil, err
	}
	l.stateDir = stateDir
	l.log = slog.New(slog.DiscardHandler)
	l.procs = newProcTable()
	return l, nil
}

// SetLogger sets the logger used by the lab's methods.
func (l *Lab) SetLogger(log *slog.Logger) {
	if log != nil {
		l.log = log
	}
}

// Node returns the node with the given name.
func (l *Lab) Node(name string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Pod returns the pod with the given name.
func (l *Lab) Pod(name string) (Pod, bool) {
	for _, p := range l.Pods {
		if p.Name == name {
			return p, true
		}
	}
	return Pod{}, false
}

// NSOf returns the namespace of a pod, a node or "underlay".
func (l *Lab) NSOf(target string) (string, error) {
	if target == "underlay" {
		return l.Underlay.NS, nil
	}
	if p, ok := l.Pod(target); ok {
		return p.NS, nil
	}
	if n, ok := l.Node(target); ok {
		return n.NS, nil
	}
	return "", fmt.Errorf("lab %s has no pod or node named %q (pods are like n1-p1, nodes like n1, or \"underlay\")", l.Name, target)
}

// DownReport says what Down removed.
type DownReport struct {
	Name            string   `json:"name"`
	StateFound      bool     `json:"state_found"`
	Namespaces      []string `json:"namespaces_removed"`
	Leftovers       []string `json:"leftovers_removed,omitempty"` // found by prefix, not in the state
	ProcessesKilled []int    `json:"processes_killed,omitempty"`
}

// Down removes the lab named name: it stops its processes, deletes its
// namespaces (recorded ones and any with the lab's prefix) and its state
// file. A lab that neither has a state file nor leftovers is ErrNotFound.
func Down(ctx context.Context, name, stateDir string, log *slog.Logger) (DownReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	if !nameRE.MatchString(name) {
		return DownReport{}, fmt.Errorf("lab name %q: want lowercase letters and digits, starting with a letter, at most 12 characters", name)
	}
	if err := CheckPrivileges(); err != nil {
		return DownReport{}, err
	}
	return down(ctx, name, stateDir, log, nil)
}

// Down removes this lab (see the package function Down). Processes this
// Lab value started are also reaped.
func (l *Lab) Down(ctx context.Context) (DownReport, error) {
	return down(ctx, l.Name, l.stateDir, l.log, l)
}

func stateFile(dir, name string) string { return filepath.Join(dir, name+".json") }
