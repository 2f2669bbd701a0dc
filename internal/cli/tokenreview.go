package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cnperf/cnperf/internal/k8sauth"
	"github.com/cnperf/cnperf/internal/server"
)

// reviewFlags are the server's flags for agents that authenticate with
// Kubernetes ServiceAccount tokens (TokenReview, in-cluster).
type reviewFlags struct {
	enabled         bool
	audience        string
	serviceAccounts []string
}

func (f *reviewFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.enabled, "agent-token-review", envOr("CNPERF_AGENT_TOKEN_REVIEW", "") == "1",
		"authenticate agents by their projected ServiceAccount tokens with TokenReview (in-cluster; the server's account needs tokenreviews create)")
	fl.StringVar(&f.audience, "agent-audience", k8sauth.Audience, "the audience agents' ServiceAccount tokens must be issued for")
	fl.StringSliceVar(&f.serviceAccounts, "agent-service-account", nil,
		"accepted agent ServiceAccounts, NAMESPACE/NAME (default: cnperf-agent in the server's own namespace)")
}

// inClusterNamespace is the file the kubelet puts the pod's namespace in.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// reviewer returns the TokenReview authenticator, or nil when disabled.
func (f *reviewFlags) reviewer() (server.AgentReviewer, error) {
	if !f.enabled {
		return nil, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--agent-token-review: %w (it runs in a pod, with its ServiceAccount token mounted)", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--agent-token-review: %w", err)
	}
	sas := f.serviceAccounts
	if len(sas) == 0 {
		ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE"))
		if ns == "" {
			b, err := os.ReadFile(inClusterNamespace)
			if err != nil {
				return nil, errors.New("--agent-token-review: the server's namespace is unknown: set POD_NAMESPACE or --agent-service-account NAMESPACE/NAME")
			}
			ns = strings.TrimSpace(string(b))
		}
		sas = []string{ns + "/cnperf-agent"}
	}
	return k8sauth.New(k8sauth.Options{Kube: kube, Audience: f.audience, ServiceAccounts: sas})
}
