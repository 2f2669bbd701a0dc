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
//	TASK_ID.EXPIRES.BOUNDS.MAC
//	MAC = base64url(HMAC-SHA-256(secret, "cnperf-test-key-2\x00" TASK_ID "\x00" EXPIRES "\x00" BOUNDS))
//
// with EXPIRES the task's deadline in Unix seconds and BOUNDS the test the
// task asks for (TestBounds: kind, direction, streams, rate, duration).
// The destination's responder recomputes the MAC, so it knows every key
// the server can give for it without being told each one (no race between
// the task reaching the source and the key reaching the destination),
// refuses a key past its expiry, takes each task's key once, refuses a
// hello that asks for more than BOUNDS and ends the session at its bound
// (Grant.End). The key is checked once per session, in the hello, never
// per packet.

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
// single-use keys, remember the key as used. The Grant says what the key
// admits.
type KeyChecker interface {
	Check(key string, now time.Time) (Grant, error)
}

// A Grant is what an admitted key allows.
type Grant struct {
	// Bounds is the test the key was issued for; nil admits any test (a
	// key of `cnperf respond --key-file`, the operator's own).
	Bounds *TestBounds
	// Expires is the key's expiry (the task's deadline); zero for none.
	Expires time.Time
}

// SessionGrace is what a session may run past its test's duration: the
// clock exchanges, the data connections' set-up, the drain and the result.
const SessionGrace = 10 * time.Second

// DefaultTestDuration is how long a test whose spec gives no duration
// runs (tcp, udp, rr without a count, iperf3).
const DefaultTestDuration = 10 * time.Second

// End is when a session admitted at admitted must end: its test's
// duration plus SessionGrace, and never past the key's expiry. Zero means
// no end.
func (g Grant) End(admitted time.Time) time.Time {
	end := g.Expires
	if g.Bounds != nil && g.Bounds.Duration > 0 {
		if d := admitted.Add(g.Bounds.Duration + SessionGrace); end.IsZero() || d.Before(end) {
			end = d
		}
	}
	return end
}

// TestBounds is the test a key was issued for; a session may ask for no
// more.
type TestBounds struct {
	Kind    string
	Reverse bool // the responder sends
	Streams int  // at most (at least 1)
	// RateBps is the highest rate a session may ask; 0 bounds none (a tcp
	// test as fast as the path allows).
	RateBps uint64
	// Duration is the longest test a session may ask; 0 is the kind's
	// default: a session may then ask at most DefaultTestDuration, and
	// only the key's expiry ends it (an rr test bounded by its count).
	Duration time.Duration
}

// BoundsOf is the bounds of the test spec asks for; defaultRate is the
// rate the spec's kind runs at when the spec gives none (0: unbounded).
func BoundsOf(spec Spec, defaultRate uint64) TestBounds {
	b := TestBounds{Kind: spec.Kind, Reverse: spec.Reverse, Streams: max(spec.Streams, 1), RateBps: defaultRate, Duration: spec.Duration.D()}
	if spec.RateBps != nil {
		b.RateBps = *spec.RateBps
	}
	return b
}

// String encodes b for a key: KIND,f|r,STREAMS,RATE,DURATION_MS.
func (b TestBounds) String() string {
	dir := "f"
	if b.Reverse {
		dir = "r"
	}
	return fmt.Sprintf("%s,%s,%d,%d,%d", b.Kind, dir, b.Streams, b.RateBps, b.Duration.Milliseconds())
}

func parseBounds(s string) (TestBounds, error) {
	f := strings.Split(s, ",")
	if len(f) != 5 || (f[1] != "f" && f[1] != "r") {
		return TestBounds{}, errors.New("test key refused: bad bounds")
	}
	streams, err1 := strconv.Atoi(f[2])
	rate, err2 := strconv.ParseUint(f[3], 10, 64)
	ms, err3 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return TestBounds{}, errors.New("test key refused: bad bounds")
	}
	return TestBounds{Kind: f[0], Reverse: f[1] == "r", Streams: streams, RateBps: rate, Duration: time.Duration(ms) * time.Millisecond}, nil
}

// Admits checks a hello's spec against the bounds; the error names the
// field that asks for more.
func (b TestBounds) Admits(spec Spec) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("test key refused: the session asks for more than the test it was issued for (%s): %s", b, fmt.Sprintf(format, args...))
	}
	if spec.Kind != b.Kind {
		return refuse("kind %q, the key is for %q", spec.Kind, b.Kind)
	}
	if spec.Reverse != b.Reverse {
		return refuse("reverse %v, the key is for reverse %v", spec.Reverse, b.Reverse)
	}
	if n := max(spec.Streams, 1); n > b.Streams {
		return refuse("streams %d, the key admits %d", n, b.Streams)
	}
	if b.RateBps > 0 {
		switch {
		case spec.RateBps == nil:
			return refuse("rate_bps unset (the kind's default), the key admits at most %d bit/s", b.RateBps)
		case *spec.RateBps == 0 || *spec.RateBps > b.RateBps:
			return refuse("rate_bps %d (0 is as fast as the host can), the key admits at most %d bit/s", *spec.RateBps, b.RateBps)
		}
	}
	limit := b.Duration
	if limit == 0 {
		limit = DefaultTestDuration
	}
	if d := spec.DurationOr(DefaultTestDuration); d > limit {
		return refuse("duration %s, the key admits at most %s", d, limit)
	}
	return nil
}

// DeriveTestKey returns the test key of task taskID, valid until expires,
// for the test b, at the responder whose secret is secret.
func DeriveTestKey(secret []byte, taskID string, expires time.Time, b TestBounds) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	bounds := b.String()
	return taskID + "." + exp + "." + bounds + "." + base64.RawURLEncoding.EncodeToString(testKeyMAC(secret, taskID, exp, bounds))
}

func testKeyMAC(secret []byte, taskID, exp, bounds string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cnperf-test-key-2\x00"))
	m.Write([]byte(taskID))
	m.Write([]byte{0})
	m.Write([]byte(exp))
	m.Write([]byte{0})
	m.Write([]byte(bounds))
	return m.Sum(nil)
}

// MaxTestKeyLen bounds a key read from a hello or a file.
const MaxTestKeyLen = 512

// DerivedKeys checks the per-task keys of an agent's responder: a key's
// MAC must verify under the secret, its expiry must be ahead, and each
// task's key admits one session, of at most the test it was issued for.
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
func (d *DerivedKeys) Check(key string, now time.Time) (Grant, error) {
	if key == "" {
		return Grant{}, ErrNoTestKey
	}
	if len(key) > MaxTestKeyLen {
		return Grant{}, errors.New("test key refused: longer than 512 bytes")
	}
	// TASK_ID may hold dots; EXPIRES, BOUNDS and MAC never do.
	malformed := errors.New("test key refused: not of the form TASK_ID.EXPIRES.BOUNDS.MAC")
	parts := make([]string, 3) // MAC, BOUNDS, EXPIRES from the right
	rest := key
	for i := range parts {
		j := strings.LastIndexByte(rest, '.')
		if j <= 0 {
			return Grant{}, malformed
		}
		rest, parts[i] = rest[:j], rest[j+1:]
	}
	taskID, exp, bounds, macText := rest, parts[2], parts[1], parts[0]
	mac, err := base64.RawURLEncoding.DecodeString(macText)
	if err != nil || !hmac.Equal(mac, testKeyMAC(d.secret, taskID, exp, bounds)) {
		return Grant{}, errors.New("test key refused: it was not issued for this responder (wrong MAC)")
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return Grant{}, errors.New("test key refused: bad expiry")
	}
	b, err := parseBounds(bounds)
	if err != nil {
		return Grant{}, err
	}
	expires := time.Unix(secs, 0)
	if !now.Before(expires) {
		return Grant{}, fmt.Errorf("test key refused: it expired at %s (the task's deadline)", expires.UTC().Format(time.RFC3339))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, until := range d.used {
		if !now.Before(until) {
			delete(d.used, id)
		}
	}
	if _, dup := d.used[taskID]; dup {
		return Grant{}, fmt.Errorf("test key refused: the key of task %s was already used (one session per task)", taskID)
	}
	d.used[taskID] = expires
	return Grant{Bounds: &b, Expires: expires}, nil
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
	sc.Buffer(make([]byte, 4096), MaxTestKeyLen+2)
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
		return nil, fmt.Errorf("key file %s: %w (keys are at most %d bytes)", path, err, MaxTestKeyLen)
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
func (s *StaticKeys) Check(key string, _ time.Time) (Grant, error) {
	if key == "" {
		return Grant{}, ErrNoTestKey
	}
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare([]byte(key), k)
	}
	if ok != 1 {
		return Grant{}, errors.New("test key refused: not one of this responder's keys")
	}
	return Grant{}, nil
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
