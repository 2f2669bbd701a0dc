package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// KeyPEM returns the CA's private key as PEM, for keeping the CA where
// only its owner reads it (a Secret no pod mounts).
func (ca *CA) KeyPEM() ([]byte, error) {
	kb, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// NotAfter is when the CA certificate expires.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// LoadCA reads a CA kept by KeyPEM and CertPEM. The certificate must be a
// CA and the key must be its own.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("ca certificate: not a CA (basic constraints)")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ca key: %T, want ECDSA", pair.PrivateKey)
	}
	return &CA{cert: cert, key: key, CertPEM: bytes.Clone(certPEM)}, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// ServingProblem says why the serving certificate certPEM (with its key
// keyPEM) must be issued anew for hosts at time now: it does not parse,
// its key is not its own, the CA did not sign it, a host is not among its
// names, it names a host no longer wanted, or it expires within
// renewBefore. "" means it can stay.
func (ca *CA) ServingProblem(certPEM, keyPEM []byte, hosts []string, now time.Time, renewBefore time.Duration) string {
	cert, err := parseCert(certPEM)
	if err != nil {
		return "certificate: " + err.Error()
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return "key: " + err.Error()
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return "not valid under the CA: " + err.Error()
	}
	has := map[string]bool{}
	for _, n := range cert.DNSNames {
		has[n] = true
	}
	for _, ip := range cert.IPAddresses {
		has[ip.String()] = true
	}
	want := map[string]bool{}
	var missing []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		want[h] = true
		if !has[h] {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return "names lack " + strings.Join(missing, ", ")
	}
	var extra []string
	for h := range has {
		if !want[h] {
			extra = append(extra, h)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return "names no longer wanted: " + strings.Join(extra, ", ")
	}
	if left := cert.NotAfter.Sub(now); left < renewBefore {
		return fmt.Sprintf("expires %s, within %v", cert.NotAfter.UTC().Format(time.RFC3339), renewBefore)
	}
	return ""
}
