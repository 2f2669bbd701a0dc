package k8stest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	dir := filepath.Join(c.RunDir, "etcd")
	_, err := c.start("etcd", "etcd", "--name", "kcn", "--data-dir", dir,
		"--listen-client-urls", "http://"+etcdClient, "--advertise-client-urls", "http://"+etcdClient,
		"--listen-peer-urls", "http://"+etcdPeer, "--initial-advertise-peer-urls", "http://"+etcdPeer,
		"--initial-cluster", "kcn=http://"+etcdPeer, "--log-level", "warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.poll(ctx, "etcd healthy", time.Minute, func() error {
		resp, err := hc.Get("http://" + etcdClient + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"health":"true"`) {
			return fmt.Errorf("etcd says %s", b)
		}
		return nil
	})
}

func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.RunDir, "pki", name) }

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p := c.pkiPath
	_, err := c.start("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"),
		"--advertise-address="+apiIP, "--bind-address="+apiIP, "--secure-port="+apiPort,
		"--etcd-servers=http://"+etcdClient,
		"--service-cluster-ip-range="+serviceCIDR,
		"--token-auth-file="+p("tokens.csv"), "--client-ca-file="+p("ca.crt"),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--kubelet-client-certificate="+p("kubelet-client.crt"), "--kubelet-client-key="+p("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		// Pods get their node's zone and region labels at binding (beta,
		// on by default, from 1.35), which agents report.
		"--feature-gates=PodTopologyLabelsAdmission=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--allow-privileged=true", "--profiling=false", "--enable-priority-and-fairness=false",
		"--cert-dir="+filepath.Join(c.RunDir, "apiserver"), "--v=1")
	if err != nil {
		return err
	}
	hc := c.httpClient()
	return c.poll(ctx, "kube-apiserver ready", 3*time.Minute, func() error {
		req, _ := http.NewRequest(http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, tail(string(b), 300))
		}
		return nil
	})
}

func (c *Cluster) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.caPool}}}
}

func (c *Cluster) startControllers(ctx context.Context) error {
	_, err := c.start("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfigPath("controller-manager"), "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-private-key-file="+c.pkiPath("sa.key"), "--root-ca-file="+c.pkiPath("ca.crt"),
		"--use-service-account-credentials=false", "--v=1")
	if err != nil {
		return err
	}
	_, err = c.start("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
		"--kubeconfig="+c.kubeconfigPath("scheduler"), "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0", "--v=1")
	return err
}

func (c *Cluster) getJSON(ctx context.Context, path string, v any) error {
	return c.apiDo(ctx, http.MethodGet, path, nil, v)
}

// apiDo sends one request to the API server as the harness's admin: body
// (if any) as JSON, the answer decoded into out (if any). A create that
// meets an existing object (409) is not an error: stages may run again.
func (c *Cluster) apiDo(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case method == http.MethodPost && resp.StatusCode == http.StatusConflict && out == nil:
		return nil
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, tail(string(b), 200))
	case out == nil:
		return nil
	}
	return json.Unmarshal(b, out)
}
