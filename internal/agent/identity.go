package agent

import (
	"errors"
	"fmt"
	"net"
	"strings"
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
)

// IdentityFromEnv reads the identity from environment variables through
// lookup (os.LookupEnv in production).
func IdentityFromEnv(lookup func(string) (string, bool)) Identity {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	return Identity{
		PodName: get(EnvPodName), PodNamespace: get(EnvPodNamespace), PodUID: get(EnvPodUID),
		PodIP: get(EnvPodIP), NodeName: get(EnvNodeName), NodeIP: get(EnvNodeIP),
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
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent identity: %w", err)
	}
	return nil
}
