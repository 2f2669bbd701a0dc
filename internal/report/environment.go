package report

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// EnvironmentLines describes what a run ran on in a few lines: the
// platform and CNI, then one line per group of nodes that are alike
// ("n1, n2: kernel 6.1.0, Debian GNU/Linux 12, 2 CPUs (AMD EPYC), 23.5
// GiB, underlay MTU 1500 (tso on, gso on, gro on), pod MTU 1500, cubic").
// Nil gives none.
func EnvironmentLines(env *hostinfo.Environment) []string {
	if env == nil {
		return nil
	}
	head := "environment: " + env.Platform
	if env.CNI != "" {
		head += ", CNI " + env.CNI
		if env.CNIVersion != "" {
			head += " " + env.CNIVersion
		}
	}
	if env.Backend != "" {
		head += ", backend " + env.Backend
	}
	if env.UnderlaySegmentation != "" {
		head += ", underlay segmentation " + env.UnderlaySegmentation
	}
	lines := []string{head}
	var order []string
	names := map[string][]string{}
	for _, n := range env.Nodes {
		d := nodeText(n)
		if _, ok := names[d]; !ok {
			order = append(order, d)
		}
		names[d] = append(names[d], n.Name)
	}
	for _, d := range order {
		lines = append(lines, "  "+strings.Join(names[d], ", ")+": "+d)
	}
	for _, n := range env.Notes {
		lines = append(lines, "  not read: "+n)
	}
	return lines
}

// nodeText is one node's description without its name.
func nodeText(n hostinfo.Node) string {
	var parts []string
	add := func(format string, v any, ok bool) {
		if ok {
			parts = append(parts, fmt.Sprintf(format, v))
		}
	}
	add("kernel %s", n.Kernel, n.Kernel != "")
	add("%s", n.OSImage, n.OSImage != "")
	if n.CPUs > 0 {
		cpu := fmt.Sprintf("%d CPUs", n.CPUs)
		if n.CPUModel != "" {
			cpu += " (" + n.CPUModel + ")"
		}
		parts = append(parts, cpu)
	}
	add("%.1f GiB", float64(n.MemoryBytes)/(1<<30), n.MemoryBytes > 0)
	if n.UnderlayMTU > 0 {
		mtu := fmt.Sprintf("underlay MTU %d", n.UnderlayMTU)
		if off, _ := n.Get("offload"); off != "" {
			mtu += " (" + off + ")"
		}
		parts = append(parts, mtu)
	}
	add("pod MTU %d", n.PodMTU, n.PodMTU > 0)
	add("%s", n.CongestionControl, n.CongestionControl != "")
	if len(parts) == 0 {
		return "not known"
	}
	return strings.Join(parts, ", ")
}
