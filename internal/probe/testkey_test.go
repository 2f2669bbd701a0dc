package probe_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// echo1 is the bounds of a one-stream echo test of the default duration.
var echo1 = probe.BoundsOf(probe.Spec{Kind: "echo"}, 0)

func TestKeyCheckers(t *testing.T) {
	secret := make([]byte, probe.ResponderSecretLen)
	for i := range secret {
		secret[i] = byte(i)
	}
	other := probe.NewResponderSecret()
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(time.Minute)
	valid := probe.DeriveTestKey(secret, "task-1", later, echo1)
	tampered := valid[:len(valid)-2] + "AA"
	if tampered == valid {
		tampered = valid[:len(valid)-2] + "BB"
	}
	cases := []struct {
		name    string
		checker probe.KeyChecker
		keys    []string // checked in order against one checker
		wantErr []string // "" = admitted
	}{
		{"derived: no key", probe.NewDerivedKeys(secret), []string{""}, []string{"carries no test key"}},
		{"derived: valid, then used again", probe.NewDerivedKeys(secret), []string{valid, valid}, []string{"", "already used"}},
		{"derived: another task's key still works", probe.NewDerivedKeys(secret),
			[]string{valid, probe.DeriveTestKey(secret, "task-2", later, echo1)}, []string{"", ""}},
		{"derived: task id with dots", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(secret, "a.b.c", later, echo1)}, []string{""}},
		{"derived: another responder's key", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(other, "task-1", later, echo1)}, []string{"wrong MAC"}},
		{"derived: tampered MAC", probe.NewDerivedKeys(secret), []string{tampered}, []string{"wrong MAC"}},
		{"derived: expiry moved", probe.NewDerivedKeys(secret),
			[]string{strings.Replace(probe.DeriveTestKey(secret, "task-1", now.Add(-time.Second), echo1), ".1799999999.", ".1800000060.", 1)}, []string{"wrong MAC"}},
		{"derived: expired", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(secret, "task-1", now, echo1)}, []string{"expired"}},
		{"derived: malformed", probe.NewDerivedKeys(secret), []string{"nonsense", ".x", strings.Repeat("k", 600)},
			[]string{"not of the form", "not of the form", "longer than"}},
		{"static: listed, twice", probe.NewStaticKeys([]string{"0123456789abcdef", "fedcba9876543210"}),
			[]string{"fedcba9876543210", "fedcba9876543210"}, []string{"", ""}},
		{"static: unlisted and empty", probe.NewStaticKeys([]string{"0123456789abcdef"}),
			[]string{"0123456789abcdeX", ""}, []string{"not one of this responder's keys", "carries no test key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, k := range c.keys {
				_, err := c.checker.Check(k, now)
				switch {
				case c.wantErr[i] == "" && err != nil:
					t.Errorf("key %d: refused: %v", i, err)
				case c.wantErr[i] != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr[i])):
					t.Errorf("key %d: err %v, want one containing %q", i, err, c.wantErr[i])
				}
			}
		})
	}
}

// TestKeyBindsTest: a derived key admits a session of at most the test it
// was issued for (kind, direction, streams, rate, duration), and its
// session ends at the test's duration plus a grace, never past the key's
// expiry.
func TestKeyBindsTest(t *testing.T) {
	secret := probe.NewResponderSecret()
	now := time.Unix(1_800_000_000, 0)
	rate := func(v uint64) *uint64 { return &v }
	sec := func(s float64) probe.Duration { return probe.Duration(s * float64(time.Second)) }
	tcp1s := probe.BoundsOf(probe.Spec{Kind: "tcp", Duration: sec(1)}, 0)
	udp10M := probe.BoundsOf(probe.Spec{Kind: "udp", RateBps: rate(10_000_000), Duration: sec(5)}, 1_000_000)
	udpDefault := probe.BoundsOf(probe.Spec{Kind: "udp"}, 1_000_000)
	cases := []struct {
		name    string
		bounds  probe.TestBounds
		hello   probe.Spec
		wantErr string // "" = admitted
	}{
		{"tcp: the task's test", tcp1s, probe.Spec{Kind: "tcp", Duration: sec(1)}, ""},
		{"tcp: fewer seconds", tcp1s, probe.Spec{Kind: "tcp", Duration: sec(0.5), Streams: 1}, ""},
		{"tcp: 64 streams", tcp1s, probe.Spec{Kind: "tcp", Duration: sec(1), Streams: 64}, "streams 64, the key admits 1"},
		{"tcp: reverse", tcp1s, probe.Spec{Kind: "tcp", Duration: sec(1), Reverse: true}, "reverse true"},
		{"tcp: longer", tcp1s, probe.Spec{Kind: "tcp", Duration: sec(45)}, "duration 45s, the key admits at most 1s"},
		{"tcp: the default duration", tcp1s, probe.Spec{Kind: "tcp"}, "duration 10s"},
		{"tcp: another kind", tcp1s, probe.Spec{Kind: "udp", Duration: sec(1)}, `kind "udp"`},
		{"udp: its rate", udp10M, probe.Spec{Kind: "udp", RateBps: rate(10_000_000), Duration: sec(5)}, ""},
		{"udp: a higher rate", udp10M, probe.Spec{Kind: "udp", RateBps: rate(10_000_001), Duration: sec(5)}, "rate_bps 10000001"},
		{"udp: unlimited", udp10M, probe.Spec{Kind: "udp", RateBps: rate(0), Duration: sec(5)}, "rate_bps 0"},
		{"udp: rate unset", udp10M, probe.Spec{Kind: "udp", Duration: sec(5)}, "rate_bps unset"},
		{"udp default: as the prober fills it", udpDefault, probe.Spec{Kind: "udp", RateBps: rate(1_000_000), Duration: sec(10), Streams: 1}, ""},
		{"udp default: faster", udpDefault, probe.Spec{Kind: "udp", RateBps: rate(2_000_000), Duration: sec(10)}, "rate_bps 2000000"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := probe.DeriveTestKey(secret, fmt.Sprintf("task-%d", i), now.Add(time.Minute), c.bounds)
			g, err := probe.NewDerivedKeys(secret).Check(key, now)
			if err != nil || g.Bounds == nil {
				t.Fatalf("key refused or unbound: %+v %v", g, err)
			}
			err = g.Bounds.Admits(c.hello)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("err %v, want one containing %q", err, c.wantErr)
			}
		})
	}
	// Tampered bounds fail the MAC.
	key := probe.DeriveTestKey(secret, "task-x", now.Add(time.Minute), tcp1s)
	if _, err := probe.NewDerivedKeys(secret).Check(strings.Replace(key, ",f,1,", ",r,64,", 1), now); err == nil || !strings.Contains(err.Error(), "wrong MAC") {
		t.Errorf("a key with its bounds raised: %v, want wrong MAC", err)
	}
	// The session's end: duration plus grace, capped by the expiry.
	for _, c := range []struct {
		name    string
		g       probe.Grant
		wantEnd time.Time
	}{
		{"duration bound", probe.Grant{Bounds: &tcp1s, Expires: now.Add(time.Hour)}, now.Add(time.Second + probe.SessionGrace)},
		{"expiry first", probe.Grant{Bounds: &tcp1s, Expires: now.Add(2 * time.Second)}, now.Add(2 * time.Second)},
		{"default duration: the expiry", probe.Grant{Bounds: &udpDefault, Expires: now.Add(time.Hour)}, now.Add(time.Hour)},
		{"static key: none", probe.Grant{}, time.Time{}},
	} {
		if got := c.g.End(now); !got.Equal(c.wantEnd) {
			t.Errorf("%s: end %v, want %v", c.name, got, c.wantEnd)
		}
	}
}
