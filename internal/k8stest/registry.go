package k8stest

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// registryHostsDir is containerd's registry config_path on every node: a
// directory per registry host ("10.250.0.1:PORT") holding its hosts.toml.
// containerd reads it at each pull, so a registry started after the nodes
// is reached as its hosts.toml says (plain HTTP here).
func (c *Cluster) registryHostsDir() string { return filepath.Join(c.RunDir, "registry-hosts") }

// Registry is an image registry on the harness's own network (the root
// namespace's address on the nodes' bridge, apiIP), served in-process by
// go-containerregistry's registry over plain HTTP. It refuses every
// request without its basic-auth credentials, so a pull that succeeds
// shows the credentials reached containerd (an image pull Secret). It
// records who fetched what with the credentials and who was refused.
type Registry struct {
	// Host is HOST:PORT, the registry part of an image reference.
	Host           string
	User, Password string

	srv      *http.Server
	hostsDir string

	mu      sync.Mutex
	fetches []RegistryRequest // GET and HEAD with the credentials
	refused []RegistryRequest // without them (or with wrong ones)
}

// RegistryRequest is one request the registry saw: the client's address
// and the method and path.
type RegistryRequest struct {
	From   string // IP address
	Method string
	Path   string
}

// StartRegistry starts a registry on apiIP (a free port) storing blobs
// under dir, and tells every node's containerd (hosts.toml under
// config_path) to reach it over plain HTTP. Close stops it and removes
// the hosts.toml.
func (c *Cluster) StartRegistry(dir string) (*Registry, error) {
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(apiIP, "0"))
	if err != nil {
		return nil, fmt.Errorf("registry: listen on the harness's network: %w", err)
	}
	r := &Registry{Host: ln.Addr().String(), User: "kcn-puller", Password: hex.EncodeToString(pw)}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(blobs)))
	r.srv = &http.Server{Handler: r.auth(inner), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	r.hostsDir = filepath.Join(c.registryHostsDir(), r.Host)
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+r.Host, "http://"+r.Host)
	if err := os.MkdirAll(r.hostsDir, 0o755); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(r.hostsDir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		ln.Close()
		return nil, err
	}
	go r.srv.Serve(ln)
	return r, nil
}

// auth lets through only requests with the registry's credentials; others
// get 401 with a Basic challenge, as a registry that refuses anonymous
// pulls answers.
func (r *Registry) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		from, _, _ := net.SplitHostPort(req.RemoteAddr)
		seen := RegistryRequest{From: from, Method: req.Method, Path: req.URL.Path}
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(r.User)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(r.Password)) != 1 {
			r.mu.Lock()
			r.refused = append(r.refused, seen)
			r.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="kcn-registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"credentials required"}]}`, http.StatusUnauthorized)
			return
		}
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			r.mu.Lock()
			r.fetches = append(r.fetches, seen)
			r.mu.Unlock()
		}
		next.ServeHTTP(w, req)
	})
}

// Fetches returns the GET and HEAD requests made with the credentials.
func (r *Registry) Fetches() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RegistryRequest(nil), r.fetches...)
}

// Refused returns the requests refused for lacking the credentials.
func (r *Registry) Refused() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RegistryRequest(nil), r.refused...)
}

// WriteDockerConfig writes dir/config.json, a Docker config holding the
// registry's credentials (what `docker login` writes), for a cnperf run
// with DOCKER_CONFIG=dir.
func (r *Registry) WriteDockerConfig(dir string) error {
	auth := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
	b, err := json.Marshal(map[string]map[string]map[string]string{"auths": {r.Host: {"auth": auth}}})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// Close stops the registry and removes its hosts.toml from the nodes'
// containerd configuration.
func (r *Registry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = r.srv.Close()
	}
	return errors.Join(err, os.RemoveAll(r.hostsDir))
}

// String names the registry and its user (not the password).
func (r *Registry) String() string {
	return fmt.Sprintf("registry http://%s (user %s, anonymous requests refused)", r.Host, r.User)
}
