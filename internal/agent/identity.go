package agent

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/pairplan"
)

// Identity is who the agent is: the pod and node it runs on. On Kubernetes
// the Downward API fills the environment variables IdentityFromEnv reads.
type Identity struct {
	PodName      string
	PodNamespace string
	PodUID       string
	PodIP        string
	NodeName     string
	NodeIP       string
	// HostNetwork marks the node's host-network agent (its pod IP is the
	// node's IP); node-node tests run between such agents.
	HostNetwork bool
	// NodeLabels are labels of the node the agent reports (its zone:
	// topology.kubernetes.io/zone or a rack label), for the pair plans
	// by zone on the server's own schedules and mesh.
	NodeLabels map[string]string
}

// Environment variables read by IdentityFromEnv (the names the seed's
// manifests used for the Downward API).
const (
	EnvPodName      = "POD_NAME"
	EnvPodNamespace = "POD_NAMESPACE"
	EnvPodUID       = "POD_UID"
	EnvPodIP        = "POD_IP"
	EnvNodeName     = "NODE_NAME"
	EnvNodeIP       = "NODE_IP"
	// EnvNodeLabels holds KEY=VALUE pairs, comma-separated.
	EnvNodeLabels = "CNPERF_NODE_LABELS"
	// EnvZone and EnvRegion hold the node's zone and region, which the
	// installs fill from the pod's own labels of the same keys
	// (LabelZone, LabelRegion): Kubernetes' PodTopologyLabels admission
	// copies them from the Node at binding, so agents need no access to
	// Nodes. Empty (an older cluster, or the node has no such label)
	// means no label.
	EnvZone   = "CNPERF_ZONE"
	EnvRegion = "CNPERF_REGION"
)

// The node labels EnvZone and EnvRegion report.
const (
	LabelZone   = pairplan.DefaultZoneLabel
	LabelRegion = "topology.kubernetes.io/region"
)

// IdentityFromEnv reads the identity from environment variables through
// lookup (os.LookupEnv in production).
func IdentityFromEnv(lookup func(string) (string, bool)) Identity {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	id := Identity{
		PodName: get(EnvPodName), PodNamespace: get(EnvPodNamespace), PodUID: get(EnvPodUID),
		PodIP: get(EnvPodIP), NodeName: get(EnvNodeName), NodeIP: get(EnvNodeIP),
	}
	topo := map[string]string{}
	for env, label := range map[string]string{EnvZone: LabelZone, EnvRegion: LabelRegion} {
		if v := get(env); v != "" {
			topo[label] = v
		}
	}
	id.AddNodeLabels(topo)
	explicit := map[string]string{}
	for _, kv := range strings.Split(get(EnvNodeLabels), ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=") // a pair without "=" is refused by Complete
		explicit[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	id.AddNodeLabels(explicit) // EnvNodeLabels wins over EnvZone and EnvRegion
	return id
}

// AddNodeLabels adds labels to the node labels the agent reports, each
// replacing one of the same key: the more explicit source is added last
// (--node-label after CNPERF_NODE_LABELS after CNPERF_ZONE/CNPERF_REGION).
func (id *Identity) AddNodeLabels(labels map[string]string) {
	for k, v := range labels {
		if id.NodeLabels == nil {
			id.NodeLabels = map[string]string{}
		}
		id.NodeLabels[k] = v
	}
}

// Complete fills what can be derived (a host-network agent's pod IP is its
// node IP) and checks the identity, naming the variable or flag that is
// missing or wrong.
func (id *Identity) Complete() error {
	if id.HostNetwork && id.PodIP == "" {
		id.PodIP = id.NodeIP
	}
	var errs []error
	need := func(v, what, env, flag string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s missing: set %s or --%s", what, env, flag))
		}
	}
	need(id.PodUID, "pod uid", EnvPodUID, "pod-uid")
	need(id.PodName, "pod name", EnvPodName, "pod-name")
	need(id.PodIP, "pod IP", EnvPodIP, "pod-ip")
	need(id.NodeName, "node name", EnvNodeName, "node-name")
	if len(id.PodUID) > 128 {
		errs = append(errs, errors.New("pod uid longer than 128 characters"))
	}
	if id.PodIP != "" && net.ParseIP(id.PodIP) == nil {
		errs = append(errs, fmt.Errorf("pod IP %q is not an IP address (%s / --pod-ip)", id.PodIP, EnvPodIP))
	}
	if id.NodeIP != "" && net.ParseIP(id.NodeIP) == nil {
		errs = append(errs, fmt.Errorf("node IP %q is not an IP address (%s / --node-ip)", id.NodeIP, EnvNodeIP))
	}
	if len(id.NodeLabels) > api.MaxNodeLabels {
		errs = append(errs, fmt.Errorf("%d node labels (%s / --node-label): at most %d", len(id.NodeLabels), EnvNodeLabels, api.MaxNodeLabels))
	}
	for k, v := range id.NodeLabels {
		if k == "" || v == "" || len(v) > 63 {
			errs = append(errs, fmt.Errorf("node label %q=%q (%s / --node-label): want KEY=VALUE, the value 1-63 characters", k, v, EnvNodeLabels))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent identity: %w", err)
	}
	return nil
}
