package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/qos"
)

// NodeReport is what an inspector pod finds in its node's network
// namespace. It travels back as the pod's termination message, so it is
// kept well below kubelet's 4096-byte limit.
type NodeReport struct {
	Kernel    string     `json:"kernel"`
	ProxyMode string     `json:"proxy_mode"`
	CNI       *CNIConfig `json:"cni,omitempty"`
	CNIError  string     `json:"cni_error,omitempty"`
	NodeMTU   int        `json:"node_mtu,omitempty"`
	VethMTU   int        `json:"veth_mtu,omitempty"`
	// Tunnels are the node's VXLAN devices by name ("cilium_vxlan",
	// "vxlan.calico", "flannel.1"): Cilium says its routing mode nowhere
	// cnperf may read, so its backend is read off the datapath.
	Tunnels []string `json:"tunnels,omitempty"`
	// MetadataTunnels are those of Tunnels in metadata mode (collect_md,
	// "external": Cilium's), whose outer TOS no device setting changes.
	MetadataTunnels []string `json:"metadata_tunnels,omitempty"`
	Links           []LinkTC `json:"links,omitempty"`
	Truncated       bool     `json:"truncated,omitempty"`
}

// CNIConfig is the network configuration kubelet's runtime uses: the
// first file of the CNI configuration directory, as the runtime picks it.
type CNIConfig struct {
	File    string   `json:"file"`
	Name    string   `json:"name"`
	Plugins []string `json:"plugins"`
	MTU     int      `json:"mtu,omitempty"`
}

// LinkTC is a link with the traffic-control state found on it.
type LinkTC struct {
	Name   string  `json:"name"`
	Index  int     `json:"index"`
	Type   string  `json:"type"`
	MTU    int     `json:"mtu"`
	Qdiscs []Qdisc `json:"qdiscs"`
	// RedirectTo names the link an ingress filter mirrors packets to (the
	// bandwidth plugin's ifb for pod egress).
	RedirectTo string `json:"redirect_to,omitempty"`
}

// Qdisc is one queueing discipline.
type Qdisc struct {
	Kind    string `json:"kind"`
	Parent  string `json:"parent"`
	RateBps uint64 `json:"rate_bps,omitempty"` // tbf: bits per second
	Limit   uint32 `json:"limit_bytes,omitempty"`
	Burst   uint32 `json:"burst_bytes,omitempty"`
}

// String is the qdisc as tc would sum it up.
func (q Qdisc) String() string {
	if q.RateBps > 0 {
		return fmt.Sprintf("%s %s rate %s burst %db limit %db", q.Kind, q.Parent, humanBits(q.RateBps), q.Burst, q.Limit)
	}
	return q.Kind + " " + q.Parent
}

// InspectOptions say what the inspector looks at.
type InspectOptions struct {
	// Ifindex, when > 0, limits the links to this one (a pod's host-side
	// veth) and the links its filters redirect to.
	Ifindex int
	// CNIConfDir is where the runtime's CNI configuration is mounted.
	CNIConfDir string
	// ProxyMetrics is kube-proxy's metrics address (its /proxyMode answer).
	ProxyMetrics string
	// NodeIP, when set, names the node's link (its MTU is the node MTU);
	// otherwise the default route's link is taken.
	NodeIP string
}

// defaultQdisc kinds say nothing about shaping or priority.
var defaultQdisc = map[string]bool{"noqueue": true, "pfifo_fast": true, "fq_codel": true, "mq": true, "noop": true, "fq": true}

// InspectLocal inspects the network namespace it runs in. It needs no
// privileges: reading links, qdiscs and filters is allowed to anyone.
func InspectLocal(ctx context.Context, o InspectOptions) (NodeReport, error) {
	var r NodeReport
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	r.ProxyMode = proxyMode(ctx, o.ProxyMetrics)
	if o.CNIConfDir != "" {
		cfg, err := ReadCNIConfig(o.CNIConfDir)
		if err != nil {
			r.CNIError = err.Error()
		} else {
			r.CNI = cfg
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return r, fmt.Errorf("list links: %w", err)
	}
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	r.NodeMTU = nodeMTU(byIndex, o.NodeIP)
	for _, l := range links {
		if l.Type() == "veth" && r.VethMTU == 0 && !hasIPv4(l) {
			r.VethMTU = l.Attrs().MTU
		}
		if l.Type() == "vxlan" {
			r.Tunnels = append(r.Tunnels, l.Attrs().Name)
			if v, ok := l.(*netlink.Vxlan); ok && v.FlowBased {
				r.MetadataTunnels = append(r.MetadataTunnels, v.Name)
			}
		}
	}
	want := map[int]bool{}
	if o.Ifindex > 0 {
		if _, ok := byIndex[o.Ifindex]; !ok {
			return r, fmt.Errorf("no link with index %d in the node's namespace", o.Ifindex)
		}
		want[o.Ifindex] = true
	}
	var out []LinkTC
	for _, l := range links {
		a := l.Attrs()
		if o.Ifindex > 0 && !want[a.Index] {
			continue
		}
		lt, interesting, err := linkTC(l, byIndex)
		if err != nil {
			return r, err
		}
		if !interesting && o.Ifindex == 0 {
			continue
		}
		if lt.RedirectTo != "" {
			for idx, x := range byIndex {
				if x.Attrs().Name == lt.RedirectTo {
					want[idx] = true
				}
			}
		}
		out = append(out, lt)
	}
	// Links a filter redirects to may come before the link in the list.
	if o.Ifindex > 0 {
		have := map[int]bool{}
		for _, lt := range out {
			have[lt.Index] = true
		}
		var idxs []int
		for idx := range want {
			if !have[idx] {
				idxs = append(idxs, idx)
			}
		}
		sort.Ints(idxs)
		for _, idx := range idxs {
			lt, _, err := linkTC(byIndex[idx], byIndex)
			if err != nil {
				return r, err
			}
			out = append(out, lt)
		}
	}
	r.Links = out
	for len(r.Links) > 0 {
		b, _ := json.Marshal(r)
		if len(b) <= 3800 {
			break
		}
		r.Links = r.Links[:len(r.Links)-1]
		r.Truncated = true
	}
	return r, nil
}

func linkTC(l netlink.Link, byIndex map[int]netlink.Link) (LinkTC, bool, error) {
	a := l.Attrs()
	lt := LinkTC{Name: a.Name, Index: a.Index, Type: l.Type(), MTU: a.MTU}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return lt, false, fmt.Errorf("qdiscs of %s: %w", a.Name, err)
	}
	interesting := false
	for _, q := range qs {
		qi := qos.QdiscInfoOf(q, nil)
		x := Qdisc{Kind: qi.Kind, Parent: qi.Parent, RateBps: qi.RateBps, Limit: qi.LimitBytes, Burst: qi.BurstBytes}
		if !defaultQdisc[x.Kind] {
			interesting = true
		}
		lt.Qdiscs = append(lt.Qdiscs, x)
		if x.Kind == "ingress" || x.Kind == "clsact" {
			fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
			if err != nil {
				return lt, interesting, fmt.Errorf("ingress filters of %s: %w", a.Name, err)
			}
			for _, f := range fs {
				if u, ok := f.(*netlink.U32); ok {
					for _, act := range u.Actions {
						if m, ok := act.(*netlink.MirredAction); ok {
							if t, ok := byIndex[m.Ifindex]; ok {
								lt.RedirectTo = t.Attrs().Name
							} else {
								lt.RedirectTo = "ifindex " + strconv.Itoa(m.Ifindex)
							}
						}
					}
				}
			}
		}
	}
	return lt, interesting, nil
}

// hasIPv4 tells a node's own veth (its uplink where the node is itself a
// namespace or VM, holding the node IP) from a pod's host-side veth, which
// carries no IPv4 address.
func hasIPv4(l netlink.Link) bool {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	return err == nil && len(addrs) > 0
}

func nodeMTU(byIndex map[int]netlink.Link, nodeIP string) int {
	if ip := net.ParseIP(nodeIP); ip != nil {
		for _, l := range byIndex {
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if a.IP.Equal(ip) {
					return l.Attrs().MTU
				}
			}
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return 0
	}
	for _, rt := range routes {
		if rt.Dst == nil || rt.Dst.IP.IsUnspecified() {
			if l, ok := byIndex[rt.LinkIndex]; ok {
				return l.Attrs().MTU
			}
		}
	}
	return 0
}

func proxyMode(ctx context.Context, addr string) string {
	if addr == "" {
		addr = "127.0.0.1:10249"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/proxyMode", nil)
	if err != nil {
		return "unknown: " + err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "unknown: kube-proxy not reachable at " + addr
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("unknown: kube-proxy answered %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(b))
}

// ReadCNIConfig reads the configuration the runtime uses: the first
// .conflist, .conf or .json file of dir in name order.
func ReadCNIConfig(dir string) (*CNIConfig, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("CNI configuration directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conflist", ".conf", ".json":
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no CNI configuration in %s", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, names[0]))
	if err != nil {
		return nil, fmt.Errorf("read CNI configuration: %w", err)
	}
	var raw struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		MTU     int    `json:"mtu"`
		Plugins []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("CNI configuration %s: %w", names[0], err)
	}
	cfg := &CNIConfig{File: names[0], Name: raw.Name, MTU: raw.MTU}
	if raw.Type != "" {
		cfg.Plugins = append(cfg.Plugins, raw.Type)
	}
	for _, p := range raw.Plugins {
		cfg.Plugins = append(cfg.Plugins, p.Type)
		if p.MTU > 0 && cfg.MTU == 0 {
			cfg.MTU = p.MTU
		}
	}
	if len(cfg.Plugins) == 0 {
		return nil, fmt.Errorf("CNI configuration %s names no plugin", names[0])
	}
	return cfg, nil
}

// PeerIndex returns the interface index of the other end of a veth, as
// seen from its own namespace (the pod's eth0 gives the host-side veth).
func PeerIndex(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "iflink"))
	if err != nil {
		return 0, fmt.Errorf("peer of %s: %w", name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0, errors.New("peer of " + name + ": bad iflink " + strings.TrimSpace(string(b)))
	}
	return n, nil
}

func humanBits(bps uint64) string {
	switch {
	case bps >= 1e9 && bps%1e6 == 0:
		return strconv.FormatFloat(float64(bps)/1e9, 'g', 4, 64) + "Gbit"
	case bps >= 1e6:
		return strconv.FormatFloat(float64(bps)/1e6, 'g', 4, 64) + "Mbit"
	case bps >= 1e3:
		return strconv.FormatFloat(float64(bps)/1e3, 'g', 4, 64) + "Kbit"
	}
	return strconv.FormatUint(bps, 10) + "bit"
}
