// Package hostinfo describes what a run ran on, the "which machine" behind
// every figure: per node the kernel, OS image, CPUs, memory, the MTU of the
// pod and underlay interfaces, TCP congestion control and the underlay's
// offload state, and the CNI with its version and mode. The CNI studies
// compare per distribution and their CPU figures depend on core count, so
// a run is only comparable with another when this is known.
//
// The types are plain data, stored with a run's params; hostread reads
// them from a host.
package hostinfo

import (
	"strconv"
	"strings"
)

// Environment is what one run ran on.
type Environment struct {
	// Platform is "lab" (cnperf's namespace lab) or "kubernetes".
	Platform   string `json:"platform"`
	CNI        string `json:"cni,omitempty"`
	CNIVersion string `json:"cni_version,omitempty"`
	// Backend is the CNI's mode (host-gw, vxlan, direct, ...).
	Backend string `json:"backend,omitempty"`
	// UnderlaySegmentation is where the lab's underlay segments ("host":
	// 64 KB batches cross it; "nic": MTU-sized packets, as on a wire).
	UnderlaySegmentation string `json:"underlay_segmentation,omitempty"`
	Nodes                []Node `json:"nodes"`
	// Notes say what could not be read, and why.
	Notes []string `json:"notes,omitempty"`
}

// Node is one node of the environment.
type Node struct {
	Name        string `json:"name"`
	Kernel      string `json:"kernel,omitempty"`
	OSImage     string `json:"os_image,omitempty"`
	CPUs        int    `json:"cpus,omitempty"`
	CPUModel    string `json:"cpu_model,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// UnderlayMTU is the MTU of the node's interface toward the other
	// nodes; PodMTU that of a pod's interface on the node.
	UnderlayMTU       int    `json:"underlay_mtu,omitempty"`
	PodMTU            int    `json:"pod_mtu,omitempty"`
	CongestionControl string `json:"congestion_control,omitempty"`
	// Offload is the underlay's segmentation and receive offloads (tso,
	// gso, gro: on or off).
	Offload map[string]bool `json:"offload,omitempty"`
}

// Get returns the named field of n as text, for grouping runs ("kernel",
// "os_image", "cpus", "cpu_model", "memory_bytes", "underlay_mtu",
// "pod_mtu", "congestion_control", "offload"); ok is false for an
// unknown name.
func (n Node) Get(field string) (string, bool) {
	switch field {
	case "kernel":
		return n.Kernel, true
	case "os_image", "os":
		return n.OSImage, true
	case "cpus":
		return strconv.Itoa(n.CPUs), true
	case "cpu_model":
		return n.CPUModel, true
	case "memory_bytes", "memory":
		return strconv.FormatUint(n.MemoryBytes, 10), true
	case "underlay_mtu", "mtu":
		return strconv.Itoa(n.UnderlayMTU), true
	case "pod_mtu":
		return strconv.Itoa(n.PodMTU), true
	case "congestion_control":
		return n.CongestionControl, true
	case "offload":
		return offloadText(n.Offload), true
	}
	return "", false
}

// Fields are the names Get and Environment.Get take.
var Fields = []string{"platform", "cni", "cni_version", "backend", "underlay_segmentation", "kernel", "os_image", "cpus", "cpu_model", "memory_bytes", "underlay_mtu", "pod_mtu", "congestion_control", "offload"}

// Get returns the named field of the environment as text: its own fields,
// or a node field with the distinct values of all nodes joined by ", ".
func (e Environment) Get(field string) (string, bool) {
	switch field {
	case "platform":
		return e.Platform, true
	case "cni":
		return e.CNI, true
	case "cni_version":
		return e.CNIVersion, true
	case "backend":
		return e.Backend, true
	case "underlay_segmentation":
		return e.UnderlaySegmentation, true
	}
	if _, ok := (Node{}).Get(field); !ok {
		return "", false
	}
	var vals []string
	for _, n := range e.Nodes {
		v, _ := n.Get(field)
		if v != "" && v != "0" && !contains(vals, v) {
			vals = append(vals, v)
		}
	}
	return strings.Join(vals, ", "), true
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

func offloadText(m map[string]bool) string {
	var parts []string
	for _, k := range []string{"tso", "gso", "gro"} {
		if v, ok := m[k]; ok {
			state := "off"
			if v {
				state = "on"
			}
			parts = append(parts, k+" "+state)
		}
	}
	return strings.Join(parts, ", ")
}
