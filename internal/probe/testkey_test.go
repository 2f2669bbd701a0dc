package probe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

func TestKeyCheckers(t *testing.T) {
	secret := make([]byte, probe.ResponderSecretLen)
	for i := range secret {
		secret[i] = byte(i)
	}
	other := probe.NewResponderSecret()
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(time.Minute)
	valid := probe.DeriveTestKey(secret, "task-1", later)
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
			[]string{valid, probe.DeriveTestKey(secret, "task-2", later)}, []string{"", ""}},
		{"derived: task id with dots", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(secret, "a.b.c", later)}, []string{""}},
		{"derived: another responder's key", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(other, "task-1", later)}, []string{"wrong MAC"}},
		{"derived: tampered MAC", probe.NewDerivedKeys(secret), []string{tampered}, []string{"wrong MAC"}},
		{"derived: expiry moved", probe.NewDerivedKeys(secret),
			[]string{strings.Replace(probe.DeriveTestKey(secret, "task-1", now.Add(-time.Second)), ".1799999999.", ".1800000060.", 1)}, []string{"wrong MAC"}},
		{"derived: expired", probe.NewDerivedKeys(secret), []string{probe.DeriveTestKey(secret, "task-1", now)}, []string{"expired"}},
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
				err := c.checker.Check(k, now)
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

// TestResponderRequiresKey: a keyed responder refuses a session without a
// valid key at the hello, with the reason on the client's side, and
// serves one with the key once.
func TestResponderRequiresKey(t *testing.T) {
	secret := probe.NewResponderSecret()
	r := probe.NewResponder(nil, echoHandler{})
	r.RequireKeys(probe.NewDerivedKeys(secret))
	if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	spec := probe.Spec{Kind: "echo", Target: r.Addr().String()}
	key := probe.DeriveTestKey(secret, "task-7", time.Now().Add(time.Minute))
	for _, c := range []struct {
		name, key, wantErr string
	}{
		{"no key", "", "serves only scheduled tests"},
		{"wrong key", probe.DeriveTestKey(probe.NewResponderSecret(), "task-7", time.Now().Add(time.Minute)), "wrong MAC"},
		{"expired key", probe.DeriveTestKey(secret, "task-8", time.Now().Add(-time.Second)), "expired"},
		{"the task's key", key, ""},
		{"the task's key again", key, "already used"},
	} {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := probe.DialWithKey(dctx, spec, probe.SockOpts{}, c.key)
		dcancel()
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
				continue
			}
			cl.Close()
			continue
		}
		if err == nil {
			cl.Close()
			t.Errorf("%s: served, want refused", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "refused the echo session") {
			t.Errorf("%s: err %q, want the refusal with %q", c.name, err, c.wantErr)
		}
	}
}
