// Package certs makes the TLS material cnperf needs where no one gives it
// any (the lab, `cnperf k8s deploy`): a private certificate authority and
// serving certificates it signs for the server's addresses, written as PEM
// files. It also builds the client side: a TLS configuration that trusts a
// CA file, or the system pool when none is given.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// CA is a certificate authority held in memory.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, what clients trust (--ca-file).
	CertPEM []byte
}

// NewCA makes a self-signed CA (ECDSA P-256) named name, valid for
// validFor from now (backdated an hour against clock skew).
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"cnperf"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue makes a serving certificate for hosts (IP addresses and DNS
// names), signed by the CA, valid for validFor. It returns the certificate
// and its private key as PEM.
func (ca *CA) Issue(hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("serving certificate: no host names or addresses")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("serving key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"cnperf"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

// Files are the paths of a server's TLS material written by WriteServer.
type Files struct {
	CA, Cert, Key string
}

// WriteServer makes a CA and a serving certificate for hosts and writes
// them to dir as ca.crt, server.crt and server.key (the key readable by
// its owner only).
func WriteServer(dir string, hosts []string, validFor time.Duration) (Files, error) {
	ca, err := NewCA("cnperf CA", validFor)
	if err != nil {
		return Files{}, err
	}
	cert, key, err := ca.Issue(hosts, validFor)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.CertPEM, 0o644}, {f.Cert, cert, 0o644}, {f.Key, key, 0o600}} {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			return Files{}, fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return f, nil
}

// ClientConfig returns the TLS configuration of a client that trusts the
// CA certificates in caFile, or the system pool when caFile is "".
func ClientConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	cfg, err := ClientConfigPEM(b)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %w", caFile, err)
	}
	return cfg, nil
}

// ClientConfigPEM returns the TLS configuration of a client that trusts
// the CA certificates in caPEM (a CA read from the cluster, for one).
func ClientConfigPEM(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in it")
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// ServerConfig loads a serving certificate and key (PEM files) into a
// server TLS configuration (TLS 1.2 or later). The files are read again
// when they change (checked at most every ReloadEvery, on a handshake),
// so a certificate renewed in place (a Kubernetes Secret volume updated
// by cert-manager or `cnperf k8s deploy`) is served without a restart;
// a pair that does not load keeps the last good one in service.
func ServerConfig(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
	}
	r := &reloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	// GetConfigForClient rather than GetCertificate: it is asked on every
	// handshake, also when the client sends no server name and when
	// something (httptest) fills Certificates.
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.get}, nil
}

// ReloadEvery is how often at most a server checks its certificate files
// for a change.
var ReloadEvery = 10 * time.Second

type reloader struct {
	certFile, keyFile string

	mu      sync.Mutex  // guards the fields below
	cfg     *tls.Config // the configuration with the loaded pair
	stamp   string      // the files' sizes and modification times when loaded
	checked time.Time
}

func fileStamp(paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (r *reloader) load() error {
	stamp := fileStamp(r.certFile, r.keyFile)
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	r.stamp = stamp
	return nil
}

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= ReloadEvery {
		r.checked = now
		if fileStamp(r.certFile, r.keyFile) != r.stamp {
			_ = r.load() // on failure the last good pair stays
		}
	}
	return r.cfg, nil
}
