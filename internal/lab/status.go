package lab

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// StatusReport is what exists of a lab.
type StatusReport struct {
	Name      string          `json:"name"`
	Backend   string          `json:"backend"`
	Phase     string          `json:"phase"`
	CreatedAt time.Time       `json:"created_at"`
	Config    Config          `json:"config"`
	Underlay  UnderlayStatus  `json:"underlay"`
	Nodes     []NodeStatus    `json:"nodes"`
	Pods      []PodStatus     `json:"pods"`
	Processes []ProcessStatus `json:"processes"`
	Leftovers []string        `json:"leftovers,omitempty"` // prefixed namespaces not in the state
	Healthy   bool            `json:"healthy"`             // phase up and every namespace there
	Cnperf    *CnperfRecord   `json:"cnperf,omitempty"`    // the control plane, if started
}

// UnderlayStatus is the underlay and whether its namespace exists.
type UnderlayStatus struct {
	Underlay
	Exists bool `json:"exists"`
}

// NodeStatus is a node and whether its namespace exists.
type NodeStatus struct {
	Node
	Exists bool `json:"exists"`
}

// PodStatus is a pod and whether its namespace exists.
type PodStatus struct {
	Pod
	Exists bool `json:"exists"`
}

// ProcessStatus is a recorded process and whether it still runs.
type ProcessStatus struct {
	ProcessRecord
	Alive bool `json:"alive"`
}

// Status reports what exists of the lab named name. A lab without a state
// file is ErrNotFound; the error names leftovers if there are any.
func Status(name, stateDir string) (StatusReport, error) {
	l, err := Open(name, stateDir)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			if left := leftoverNamespaces(name); len(left) > 0 {
				return StatusReport{Name: name, Leftovers: left}, fmt.Errorf("lab %q has no state file but %d leftover namespaces (run cnperf lab down --name %s): %w", name, len(left), name, ErrNotFound)
			}
			return StatusReport{Name: name}, fmt.Errorf("lab %q does not exist: %w", name, ErrNotFound)
		}
		return StatusReport{Name: name}, err
	}
	return l.Status(), nil
}

// Status reports what exists of l now.
func (l *Lab) Status() StatusReport {
	r := StatusReport{Name: l.Name, Backend: l.Config.Backend, Phase: l.Phase, CreatedAt: l.CreatedAt, Config: l.Config,
		Nodes: []NodeStatus{}, Pods: []PodStatus{}, Processes: []ProcessStatus{}, Cnperf: l.Cnperf}
	all := l.Phase == PhaseUp
	r.Underlay = UnderlayStatus{Underlay: l.Underlay, Exists: nsExists(l.Underlay.NS)}
	all = all && r.Underlay.Exists
	for _, n := range l.Nodes {
		ns := NodeStatus{Node: n, Exists: nsExists(n.NS)}
		all = all && ns.Exists
		r.Nodes = append(r.Nodes, ns)
	}
	for _, p := range l.Pods {
		ps := PodStatus{Pod: p, Exists: nsExists(p.NS)}
		all = all && ps.Exists
		r.Pods = append(r.Pods, ps)
	}
	for _, p := range l.Processes {
		r.Processes = append(r.Processes, ProcessStatus{ProcessRecord: p, Alive: alive(p.PID, p.StartTicks)})
	}
	for _, n := range leftoverNamespaces(l.Name) {
		if !slices.Contains(l.Namespaces, n) {
			r.Leftovers = append(r.Leftovers, n)
		}
	}
	r.Healthy = all
	return r
}
