package k8stest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (c *Cluster) kubeconfigPath(name string) string {
	return filepath.Join(c.RunDir, "kubeconfigs", name+".kubeconfig")
}

// pki makes the cluster's CA, the API server's serving certificate, its
// client certificate for kubelets, the service-account key pair, one token
// per component (token-file authentication) and their kubeconfigs.
func (c *Cluster) pki(_ context.Context) error {
	dir := filepath.Join(c.RunDir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.RunDir, "kubeconfigs"), 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cnperf-harness-ca"},
		NotBefore: now, NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	c.caPool = x509.NewCertPool()
	c.caPool.AddCert(caCert)

	issue := func(name string, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.NotBefore, tmpl.NotAfter = now, now.Add(48*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", kb)
	}
	err = issue("apiserver", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(apiIP), net.ParseIP(serviceIP), net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}})
	if err != nil {
		return err
	}
	err = issue("kubelet-client", &x509.Certificate{SerialNumber: big.NewInt(3),
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub); err != nil {
		return err
	}

	// Token-file users. Control-plane components are cluster admins here
	// (the harness tests cnperf, not Kubernetes' bootstrap RBAC); kubelets
	// are real node identities under the Node authorizer; kube-proxy uses
	// its bootstrap binding (system:node-proxier).
	type user struct{ file, name, groups string }
	users := []user{
		{"admin", "kcn-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", "system:masters"},
		{"scheduler", "system:kube-scheduler", "system:masters"},
		{"kube-proxy", "system:kube-proxy", ""},
	}
	for _, n := range c.Nodes {
		users = append(users, user{n.Name, "system:node:" + n.Name, "system:nodes"})
	}
	var csv strings.Builder
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	for i, u := range users {
		tok, err := token()
		if err != nil {
			return err
		}
		fmt.Fprintf(&csv, "%s,%s,uid-%d,%q\n", tok, u.name, i, u.groups)
		if u.file == "admin" {
			c.adminToken = tok
		}
		kc := kubeconfig(c.Server, caPEM, u.name, tok)
		if err := os.WriteFile(c.kubeconfigPath(u.file), []byte(kc), 0o600); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.kubeconfigPath("admin")
	return os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(csv.String()), 0o600)
}

// UserKubeconfig writes a kubeconfig for an existing bearer token (e.g. a
// service account's) and returns its path.
func (c *Cluster) UserKubeconfig(name, tok string) (string, error) {
	caPEM, err := os.ReadFile(c.pkiPath("ca.crt"))
	if err != nil {
		return "", err
	}
	p := c.kubeconfigPath(name)
	return p, os.WriteFile(p, []byte(kubeconfig(c.Server, caPEM, name, tok)), 0o600)
}

func kubeconfig(server string, caPEM []byte, user, tok string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kcn
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kcn
  context: {cluster: kcn, user: %q}
current-context: kcn
`, server, b64(caPEM), strings.ReplaceAll(user, ":", "-"), tok, strings.ReplaceAll(user, ":", "-"))
}

func token() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
