package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Namespace is where the manifests put the server, the agents and the test
// pods.
const Namespace = "cnperf"

// DefaultRequestTimeout bounds every single API request.
const DefaultRequestTimeout = 15 * time.Second

// Config says how to reach the cluster.
type Config struct {
	// Kubeconfig is a kubeconfig file; empty means $KUBECONFIG, then
	// ~/.kube/config, then the pod's in-cluster credentials.
	Kubeconfig string
	// Context is the kubeconfig context; empty means its current one.
	Context string
	// RequestTimeout bounds each API request (DefaultRequestTimeout if 0).
	RequestTimeout time.Duration
	// Namespace is where cnperf is (or is deployed); empty means Namespace.
	Namespace string
}

// Client talks to one cluster.
type Client struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	REST    *rest.Config // nil for clients made by NewForInterfaces
	Host    string
	// Namespace is where cnperf is; empty means the package's Namespace.
	Namespace string
}

// NS returns the namespace the client works in.
func (c *Client) NS() string {
	if c.Namespace == "" {
		return Namespace
	}
	return c.Namespace
}

// ErrNoKubeconfig means no kubeconfig was given or found.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// RESTConfig resolves cfg to a client-go configuration without contacting
// the cluster.
func RESTConfig(cfg Config) (*rest.Config, error) {
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	path := cfg.Kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".kube", "config"); fileExists(p) {
				path = p
			}
		}
	}
	var rc *rest.Config
	switch {
	case path != "":
		for _, p := range filepath.SplitList(path) {
			if !fileExists(p) {
				return nil, fmt.Errorf("%w: %s does not exist", ErrNoKubeconfig, p)
			}
		}
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(path)}
		over := &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		rc = c
	default:
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%w: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config (not running in a pod either: %v)", ErrNoKubeconfig, err)
		}
		rc = c
	}
	rc.Timeout = timeout
	rc.UserAgent = "cnperf"
	// Fail fast on an unreachable address instead of the OS connect timeout.
	rc.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return rc, nil
}

// New makes a client for cfg and checks that the API server answers
// within the request timeout.
func New(ctx context.Context, cfg Config) (*Client, error) {
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client for %s: %w", rc.Host, err)
	}
	if cfg.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(cfg.Namespace) {
			return nil, fmt.Errorf("namespace %q: %s", cfg.Namespace, msg)
		}
	}
	c := &Client{Kube: kc, Dynamic: dc, REST: rc, Host: rc.Host, Namespace: cfg.Namespace}
	if _, err := c.ServerVersion(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// NewForInterfaces wraps existing clients (fakes in tests).
func NewForInterfaces(kc kubernetes.Interface, dc dynamic.Interface) *Client {
	return &Client{Kube: kc, Dynamic: dc, Host: "(fake)"}
}

// ServerVersion asks the API server for its version; an error says the
// server is unreachable or refused the credentials.
func (c *Client) ServerVersion(ctx context.Context) (*version.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if c.REST == nil { // fake clients have no REST client to ask
		v, err := c.Kube.Discovery().ServerVersion()
		if err != nil {
			return nil, c.explain(err, "get server version")
		}
		return v, nil
	}
	var info version.Info
	body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, c.explain(err, "get server version")
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("API server %s: version answer: %w", c.Host, err)
	}
	return &info, nil
}

func (c *Client) timeout() time.Duration {
	if c.REST != nil && c.REST.Timeout > 0 {
		return c.REST.Timeout
	}
	return DefaultRequestTimeout
}

// explain turns an API error into one that says what was tried and what
// is likely wrong.
func (c *Client) explain(err error, what string) error {
	var uerr *url.Error
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: forbidden: the kubeconfig's user lacks RBAC permission (see deploy/kubernetes/base/rbac.yaml): %w", what, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: unauthorized: the API server %s refused the kubeconfig's credentials: %w", what, c.Host, err)
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return fmt.Errorf("%s: API server %s did not answer in time: %w", what, c.Host, err)
	case errors.As(err, &uerr):
		return fmt.Errorf("%s: API server %s unreachable: %w", what, c.Host, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
