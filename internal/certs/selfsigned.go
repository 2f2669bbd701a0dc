package certs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A server given no certificate makes its own TLS material on first
// start and keeps it in a directory, so that clients trust the same CA
// across restarts (cnperf server, TLS by default).
const (
	// KeptCAValidity is how long a kept CA is valid.
	KeptCAValidity = 10 * 365 * 24 * time.Hour
	// KeptServingValidity is how long a serving certificate it issues is
	// valid; it is issued anew on a start within KeptRenewBefore of its
	// end, or when the server's names change.
	KeptServingValidity = 397 * 24 * time.Hour
	KeptRenewBefore     = 30 * 24 * time.Hour
)

// Kept is the TLS material EnsureServer keeps in its directory.
type Kept struct {
	Files
	CAKey string // the CA's private key (owner-only)
	// CASHA256 is the SHA-256 fingerprint of the CA certificate (hex,
	// colon-separated), for a user to check the CA file they were given.
	CASHA256 string
	// MadeCA and Issued say what this call made: a new CA, a new serving
	// certificate.
	MadeCA, Issued bool
	// Why is the reason the serving certificate was issued anew ("" when
	// it was kept or is the first).
	Why string
}

// EnsureServer keeps a CA and a serving certificate for hosts in dir
// (ca.crt, ca.key, server.crt, server.key; keys owner-only; dir made
// 0700 if missing): the CA is made once and loaded after; the serving
// certificate is issued anew when missing, not valid under the CA, not
// for exactly hosts, or near its end.
func EnsureServer(dir string, hosts []string, now time.Time) (Kept, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Kept{}, fmt.Errorf("tls directory: %w", err)
	}
	k := Kept{Files: Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")},
		CAKey: filepath.Join(dir, "ca.key")}
	ca, err := loadKeptCA(k.CA, k.CAKey)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = NewCA("cnperf server CA", KeptCAValidity); err != nil {
			return Kept{}, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return Kept{}, err
		}
		// The key first: a CA certificate without its key is unusable.
		if err := writeFile(k.CAKey, keyPEM, 0o600); err != nil {
			return Kept{}, err
		}
		if err := writeFile(k.CA, ca.CertPEM, 0o644); err != nil {
			return Kept{}, err
		}
		k.MadeCA = true
	} else if err != nil {
		return Kept{}, err
	}
	sum := sha256.Sum256(ca.cert.Raw)
	hx := hex.EncodeToString(sum[:])
	parts := make([]string, 0, len(sum))
	for i := 0; i < len(hx); i += 2 {
		parts = append(parts, strings.ToUpper(hx[i:i+2]))
	}
	k.CASHA256 = strings.Join(parts, ":")

	certPEM, cerr := os.ReadFile(k.Cert)
	keyPEM, kerr := os.ReadFile(k.Key)
	switch {
	case cerr != nil || kerr != nil:
		k.Why = "" // the first
	default:
		k.Why = ca.ServingProblem(certPEM, keyPEM, hosts, now, KeptRenewBefore)
		if k.Why == "" {
			return k, nil
		}
	}
	cert, key, err := ca.Issue(hosts, KeptServingValidity)
	if err != nil {
		return Kept{}, err
	}
	if err := writeFile(k.Key, key, 0o600); err != nil {
		return Kept{}, err
	}
	if err := writeFile(k.Cert, cert, 0o644); err != nil {
		return Kept{}, err
	}
	k.Issued = true
	return k, nil
}

// loadKeptCA reads the CA kept in certFile and keyFile; both missing is
// fs.ErrNotExist, one missing is an error naming it.
func loadKeptCA(certFile, keyFile string) (*CA, error) {
	certPEM, cerr := os.ReadFile(certFile)
	keyPEM, kerr := os.ReadFile(keyFile)
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		return nil, fs.ErrNotExist
	case cerr != nil:
		return nil, fmt.Errorf("kept CA: %w (remove %s to make a new CA)", cerr, keyFile)
	case kerr != nil:
		return nil, fmt.Errorf("kept CA key: %w (remove %s to make a new CA)", kerr, certFile)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kept CA in %s: %w", filepath.Dir(certFile), err)
	}
	return ca, nil
}

// writeFile writes data to path with mode, through a temporary file
// renamed into place, so that a crash leaves the old file or the new one.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
