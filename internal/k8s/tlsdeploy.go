package k8s

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/certs"
)

// Lifetimes of what `cnperf k8s deploy --tls` makes: the CA lasts ten
// years, a serving certificate one; a re-deploy issues a new serving
// certificate when less than RenewBefore of it is left (or its names
// changed), and a new CA only when the kept one is unreadable or within
// RenewBefore of its end.
const (
	CAValidity      = 10 * 365 * 24 * time.Hour
	ServingValidity = 365 * 24 * time.Hour
	RenewBefore     = 30 * 24 * time.Hour
)

// TLSState is what ensureTLS found and did.
type TLSState struct {
	Hosts []string // the serving certificate's names
	// CAMade and ServingMade say what was (re)made; Why is the reason a
	// kept serving certificate was replaced.
	CAMade, ServingMade bool
	Why                 string
	// ServingHash and CAHash are SHA-256 of the PEM certificates, for
	// the pod template annotations.
	ServingHash, CAHash string
}

// TLSHosts are the names the serving certificate carries: the Service's
// DNS names and, when the server is a NodePort, the nodes' internal IPs
// (clients outside the cluster reach NODE_IP:NODEPORT).
func (c *Client) TLSHosts(ctx context.Context, nodePort bool) ([]string, error) {
	hosts := ServerDNSNames(c.NS())
	if !nodePort {
		return hosts, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	nodes, err := c.Kube.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		return nil, c.explain(err, "list nodes (their addresses go into the serving certificate of a NodePort server)")
	}
	var ips []string
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				if ip := net.ParseIP(a.Address); ip != nil {
					ips = append(ips, ip.String())
				}
			}
		}
	}
	sort.Strings(ips)
	for i, ip := range ips {
		if i == 0 || ips[i-1] != ip {
			hosts = append(hosts, ip)
		}
	}
	return hosts, nil
}

// EnsureTLS keeps the namespace's CA (making one when there is none) and
// a serving certificate for hosts signed by it, re-issued when its names
// or its expiry need it; the CA certificate alone goes to the CABundle
// ConfigMap. It is idempotent: a second call with the same hosts changes
// nothing.
func (c *Client) EnsureTLS(ctx context.Context, hosts []string, now time.Time, log io.Writer) (TLSState, error) {
	st := TLSState{Hosts: hosts}
	secrets := c.Kube.CoreV1().Secrets(c.NS())
	ca, caSecret, err := c.loadCA(ctx)
	if err != nil {
		return st, err
	}
	if ca != nil && ca.NotAfter().Sub(now) < RenewBefore {
		fmt.Fprintf(log, "secret/%s: the CA expires %s: a new CA replaces it (agents roll to trust it)\n", CASecret, ca.NotAfter().UTC().Format(time.RFC3339))
		ca = nil
	}
	if ca == nil {
		if ca, err = certs.NewCA("cnperf CA ("+c.NS()+")", CAValidity); err != nil {
			return st, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return st, err
		}
		s := &corev1.Secret{ObjectMeta: meta(CASecret, c.NS()), Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": keyPEM}}
		if err := c.putSecret(ctx, s, caSecret); err != nil {
			return st, err
		}
		st.CAMade = true
		fmt.Fprintf(log, "secret/%s created (a new CA; its key stays in this Secret, which no pod mounts)\n", CASecret)
	}
	if err := c.putCABundle(ctx, ca.CertPEM, log); err != nil {
		return st, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	serving, err := secrets.Get(rctx, ServingSecret, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		serving, st.Why = nil, "none yet"
	case err != nil:
		return st, c.explain(err, "get secret "+ServingSecret)
	default:
		st.Why = ca.ServingProblem(serving.Data[corev1.TLSCertKey], serving.Data[corev1.TLSPrivateKeyKey], hosts, now, RenewBefore)
	}
	if st.Why != "" {
		certPEM, keyPEM, err := ca.Issue(hosts, ServingValidity)
		if err != nil {
			return st, err
		}
		s := &corev1.Secret{ObjectMeta: meta(ServingSecret, c.NS()), Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
		if err := c.putSecret(ctx, s, serving); err != nil {
			return st, err
		}
		serving, st.ServingMade = s, true
		fmt.Fprintf(log, "secret/%s issued for %v (%s)\n", ServingSecret, hosts, st.Why)
	} else {
		fmt.Fprintf(log, "secret/%s kept (valid for %v, CA kept)\n", ServingSecret, hosts)
	}
	st.ServingHash, st.CAHash = hashOf(serving.Data[corev1.TLSCertKey]), hashOf(ca.CertPEM)
	return st, nil
}

func meta(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/part-of": "cnperf"}}
}

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// loadCA reads the kept CA; nil (and the Secret, if any) when there is
// none or it is unreadable (then it is replaced, and says so).
func (c *Client) loadCA(ctx context.Context) (*certs.CA, *corev1.Secret, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	s, err := c.Kube.CoreV1().Secrets(c.NS()).Get(rctx, CASecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, c.explain(err, "get secret "+CASecret)
	}
	ca, err := certs.LoadCA(s.Data["ca.crt"], s.Data["ca.key"])
	if err != nil {
		return nil, s, nil
	}
	return ca, s, nil
}

// putSecret creates s, or replaces old's data with s's.
func (c *Client) putSecret(ctx context.Context, s, old *corev1.Secret) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	secrets := c.Kube.CoreV1().Secrets(c.NS())
	var err error
	if old == nil {
		_, err = secrets.Create(rctx, s, metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil {
			return c.explain(err, "create secret "+s.Name)
		}
		return nil
	}
	if old.Type != s.Type { // a Secret's type cannot change in place
		if err := secrets.Delete(rctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return c.explain(err, "delete secret "+s.Name)
		}
		_, err = secrets.Create(rctx, s, metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil {
			return c.explain(err, "create secret "+s.Name)
		}
		return nil
	}
	upd := old.DeepCopy()
	upd.Data, upd.StringData = s.Data, nil
	if _, err = secrets.Update(rctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return c.explain(err, "update secret "+s.Name)
	}
	return nil
}

// putCABundle makes the CABundle ConfigMap hold caPEM.
func (c *Client) putCABundle(ctx context.Context, caPEM []byte, log io.Writer) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	cms := c.Kube.CoreV1().ConfigMaps(c.NS())
	old, err := cms.Get(rctx, CABundle, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm := &corev1.ConfigMap{ObjectMeta: meta(CABundle, c.NS()), Data: map[string]string{CABundleKey: string(caPEM)}}
		if _, err := cms.Create(rctx, cm, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return c.explain(err, "create configmap "+CABundle)
		}
		fmt.Fprintf(log, "configmap/%s created (the CA certificate agents and the CLI trust)\n", CABundle)
	case err != nil:
		return c.explain(err, "get configmap "+CABundle)
	case old.Data[CABundleKey] != string(caPEM):
		upd := old.DeepCopy()
		if upd.Data == nil {
			upd.Data = map[string]string{}
		}
		upd.Data[CABundleKey] = string(caPEM)
		if _, err := cms.Update(rctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return c.explain(err, "update configmap "+CABundle)
		}
		fmt.Fprintf(log, "configmap/%s updated to the CA\n", CABundle)
	}
	return nil
}

// ServerTLS is how a client outside the cluster verifies the server.
type ServerTLS struct {
	CAPEM      []byte // from the CABundle ConfigMap
	ServerName string // the Service's name in the certificate
}

// serverTLS reads how the server pod p serves: nil for plain HTTP; for
// HTTPS the CA from the CABundle ConfigMap, which must be there (the CLI
// never skips verification).
func (c *Client) serverTLS(ctx context.Context, p *corev1.Pod) (*ServerTLS, error) {
	var on bool
	for _, ctr := range p.Spec.Containers {
		for _, a := range ctr.Args {
			on = on || a == "--tls-cert"
		}
	}
	if !on {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	cm, err := c.Kube.CoreV1().ConfigMaps(c.NS()).Get(rctx, CABundle, metav1.GetOptions{})
	if err != nil {
		return nil, c.explain(err, "the server serves HTTPS: get configmap "+CABundle+" (the CA to verify it with)")
	}
	ca := []byte(cm.Data[CABundleKey])
	if len(bytes.TrimSpace(ca)) == 0 {
		return nil, errors.New("the server serves HTTPS but configmap " + CABundle + " has no " + CABundleKey + ": re-run cnperf k8s deploy")
	}
	return &ServerTLS{CAPEM: ca, ServerName: ServerName + "." + c.NS() + ".svc"}, nil
}
