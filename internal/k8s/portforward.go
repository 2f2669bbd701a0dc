package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/certs"
)

// ServerSelector selects the server's pods.
const ServerSelector = "app.kubernetes.io/name=cnperf-server"

// Forward is a port-forward from a local port to the server pod.
type Forward struct {
	URL string // http://127.0.0.1:PORT, or https:// when the server serves TLS
	Pod string
	// TLS is how to verify the server (nil: it serves plain HTTP).
	TLS  *ServerTLS
	stop chan struct{}
	once sync.Once
	done chan error
}

// Close stops the forward.
func (f *Forward) Close() error {
	f.once.Do(func() { close(f.stop) })
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// ForwardServer opens a port-forward through the API server to a ready
// server pod's HTTP port and returns its local URL, so the CLI reaches the
// server with no Service exposed outside the cluster.
func (c *Client) ForwardServer(ctx context.Context, timeout time.Duration) (*Forward, error) {
	return c.ForwardServerPod(ctx, "", timeout)
}

// ForwardServerPod is ForwardServer to the server pod named pod (any
// ready one when pod is empty): with several server replicas, a caller
// that must keep talking to one picks it.
func (c *Client) ForwardServerPod(ctx context.Context, name string, timeout time.Duration) (*Forward, error) {
	if c.REST == nil {
		return nil, errors.New("port-forward needs a real cluster client")
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	pods, err := c.Kube.CoreV1().Pods(c.NS()).List(rctx, metav1.ListOptions{LabelSelector: ServerSelector})
	cancel()
	if err != nil {
		return nil, c.explain(err, "list server pods")
	}
	var pod *corev1.Pod
	var why []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if name != "" && p.Name != name {
			continue
		}
		if podReady(p) && p.DeletionTimestamp == nil {
			pod = p
			break
		}
		why = append(why, p.Name+": "+PodProblem(p))
	}
	if pod == nil {
		if len(why) == 0 && name != "" {
			return nil, fmt.Errorf("no cnperf server pod %s", name)
		}
		if len(why) == 0 {
			return nil, errors.New("no cnperf server pod: run `cnperf k8s deploy` first")
		}
		return nil, fmt.Errorf("no ready cnperf server pod (%s)", strings.Join(why, "; "))
	}
	stls, err := c.serverTLS(ctx, pod)
	if err != nil {
		return nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(c.REST)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	u := c.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.NS()).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt, Timeout: 0}, http.MethodPost, u)
	f := &Forward{Pod: pod.Name, TLS: stls, stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	var errOut strings.Builder
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, f.stop, ready, io.Discard, &syncWriter{w: &errOut})
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", pod.Name, err)
	}
	go func() { f.done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		return nil, c.explain(fmt.Errorf("port-forward to %s: %w", pod.Name, err), "port-forward")
	case <-time.After(timeout):
		f.Close()
		return nil, fmt.Errorf("port-forward to %s: not ready after %v", pod.Name, timeout)
	case <-ctx.Done():
		f.Close()
		return nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		f.Close()
		return nil, fmt.Errorf("port-forward to %s: no local port: %v", pod.Name, err)
	}
	scheme := "http"
	if stls != nil {
		scheme = "https"
	}
	f.URL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0].Local)
	return f, nil
}

// ClientOptions are the API client's options to verify the server behind
// the forward: its CA (read from the cluster) and the Service's name in
// its certificate. None for a plain HTTP server.
func (f *Forward) ClientOptions() []client.Option {
	if f.TLS == nil {
		return nil
	}
	return []client.Option{client.WithCAPEM(f.TLS.CAPEM), client.WithServerName(f.TLS.ServerName)}
}

// HTTPClient is a plain HTTP client (timeout t) that verifies the server
// behind the forward as ClientOptions do.
func (f *Forward) HTTPClient(t time.Duration) (*http.Client, error) {
	hc := &http.Client{Timeout: t}
	if f.TLS == nil {
		return hc, nil
	}
	cfg, err := certs.ClientConfigPEM(f.TLS.CAPEM)
	if err != nil {
		return nil, fmt.Errorf("CA of the server: %w", err)
	}
	cfg.ServerName = f.TLS.ServerName
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	hc.Transport = tr
	return hc, nil
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
