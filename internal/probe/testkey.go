package probe

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Test keys close a responder to everyone but scheduled tests (see
// docs/probes.md, "A responder that serves only scheduled tests").
//
// An agent's responder holds a secret (ResponderSecretLen random bytes,
// new at every start) that it tells the server in its heartbeats. The
// server gives each task's source agent the task's test key,
//
//	TASK_ID.EXPIRES.MAC    MAC = base64url(HMAC-SHA-256(secret, "cnperf-test-key\x00" TASK_ID "\x00" EXPIRES))
//
// with EXPIRES the task's deadline in Unix seconds. The destination's
// responder recomputes the MAC, so it knows every key the server can give
// for it without being told each one (no race between the task reaching
// the source and the key reaching the destination), refuses a key past its
// expiry and takes each task's key once. The key is checked once per
// session, in the hello, never per packet.

// ResponderSecretLen is the length of a responder's key secret.
const ResponderSecretLen = 32

// NewResponderSecret returns a random responder secret.
func NewResponderSecret() []byte {
	b := make([]byte, ResponderSecretLen)
	_, _ = rand.Read(b)
	return b
}

// ErrNoTestKey is a session refused for carrying no test key.
var ErrNoTestKey = errors.New("this responder serves only scheduled tests: the session carries no test key " +
	"(an agent's responder takes the key the server gives the task's source agent; `cnperf respond --require-key` takes one of its --key-file keys, given to the client with --key-file)")

// KeyChecker decides whether a session's test key admits it. Check is
// called once per session; it must compare in constant time and, for
// single-use keys, remember the key as used.
type KeyChecker interface {
	Check(key string, now time.Time) error
}

// DeriveTestKey returns the test key of task taskID, valid until expires,
// at the responder whose secret is secret.
func DeriveTestKey(secret []byte, taskID string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return taskID + "." + exp + "." + base64.RawURLEncoding.EncodeToString(testKeyMAC(secret, taskID, exp))
}

func testKeyMAC(secret []byte, taskID, exp string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cnperf-test-key\x00"))
	m.Write([]byte(taskID))
	m.Write([]byte{0})
	m.Write([]byte(exp))
	return m.Sum(nil)
}

// maxTestKeyLen bounds a key read from a hello or a file.
const maxTestKeyLen = 512

// DerivedKeys checks the per-task keys of an agent's responder: a key's
// MAC must verify under the secret, its expiry must be ahead, and each
// task's key admits one session.
type DerivedKeys struct {
	secret []byte

	mu   sync.Mutex           // guards used
	used map[string]time.Time // task id → expiry, until it passes
}

// NewDerivedKeys returns the checker of keys derived from secret.
func NewDerivedKeys(secret []byte) *DerivedKeys {
	return &DerivedKeys{secret: append([]byte(nil), secret...), used: map[string]time.Time{}}
}

// Check admits a valid, unexpired, unused key and marks it used.
func (d *DerivedKeys) Check(key string, now time.Time) error {
	if key == "" {
		return ErrNoTestKey
	}
	if len(key) > maxTestKeyLen {
		return errors.New("test key refused: longer than 512 bytes")
	}
	// TASK_ID may hold dots; EXPIRES and MAC never do.
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return errors.New("test key refused: not of the form TASK_ID.EXPIRES.MAC")
	}
	j := strings.LastIndexByte(key[:i], '.')
	if j <= 0 {
		return errors.New("test key refused: not of the form TASK_ID.EXPIRES.MAC")
	}
	taskID, exp, macText := key[:j], key[j+1:i], key[i+1:]
	mac, err := base64.RawURLEncoding.DecodeString(macText)
	if err != nil || !hmac.Equal(mac, testKeyMAC(d.secret, taskID, exp)) {
		return errors.New("test key refused: it was not issued for this responder (wrong MAC)")
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return errors.New("test key refused: bad expiry")
	}
	expires := time.Unix(secs, 0)
	if !now.Before(expires) {
		return fmt.Errorf("test key refused: it expired at %s (the task's deadline)", expires.UTC().Format(time.RFC3339))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, until := range d.used {
		if !now.Before(until) {
			delete(d.used, id)
		}
	}
	if _, dup := d.used[taskID]; dup {
		return fmt.Errorf("test key refused: the key of task %s was already used (one session per task)", taskID)
	}
	d.used[taskID] = expires
	return nil
}

// StaticKeys checks keys against a fixed list (`cnperf respond
// --require-key --key-file FILE`). They do not expire and may be used
// again: they belong to whoever runs the responder.
type StaticKeys struct{ keys [][]byte }

// MinStaticKeyLen is the shortest key a key file may hold.
const MinStaticKeyLen = 16

// ReadKeyFile reads test keys, one per line; blank lines and lines
// starting with # are skipped. Each key is at least MinStaticKeyLen
// bytes.
func ReadKeyFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxTestKeyLen+2)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < MinStaticKeyLen {
			return nil, fmt.Errorf("key file %s line %d: a key of %d bytes, want at least %d", path, n, len(line), MinStaticKeyLen)
		}
		keys = append(keys, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("key file %s: %w (keys are at most %d bytes)", path, err, maxTestKeyLen)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("key file %s holds no key", path)
	}
	return keys, nil
}

// NewStaticKeys returns the checker of a fixed list of keys.
func NewStaticKeys(keys []string) *StaticKeys {
	s := &StaticKeys{}
	for _, k := range keys {
		s.keys = append(s.keys, []byte(k))
	}
	return s
}

// Check admits a key on the list; every entry is compared, in constant
// time, whatever matched.
func (s *StaticKeys) Check(key string, _ time.Time) error {
	if key == "" {
		return ErrNoTestKey
	}
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare([]byte(key), k)
	}
	if ok != 1 {
		return errors.New("test key refused: not one of this responder's keys")
	}
	return nil
}

// ParseResponderSecret reads a hex responder secret (as heartbeats carry
// it).
func ParseResponderSecret(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ResponderSecretLen {
		return nil, fmt.Errorf("want %d hex digits", 2*ResponderSecretLen)
	}
	return b, nil
}
