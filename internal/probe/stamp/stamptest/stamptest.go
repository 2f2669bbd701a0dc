// Package stamptest runs stamp-suite, the independent STAMP
// implementation the interoperability tests measure cnperf against, in
// network namespaces: it finds the binary the test set-up built
// (scripts/install-test-deps.sh), builds an A — R — B namespace chain
// whose router masquerades A toward B, writes key files, runs its sender
// and reads its JSON summary, and starts its reflector. Tests skip with the
// reason when stamp-suite, root or iptables is missing.
package stamptest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

// Version is the stamp-suite version the tests were written against.
const Version = "1.0.0"

// Binary finds stamp-suite: $CNPERF_STAMP_SUITE, the test set-up's cache
// ($CNPERF_STAMP_SUITE_ROOT or /var/cache/cnperf-stamp/stamp-suite-1.0.0),
// or PATH. It skips t when none is stamp-suite 1.0.0.
func Binary(t testing.TB) string {
	t.Helper()
	cands := []string{os.Getenv("CNPERF_STAMP_SUITE")}
	root := os.Getenv("CNPERF_STAMP_SUITE_ROOT")
	if root == "" {
		root = "/var/cache/cnperf-stamp/stamp-suite-" + Version
	}
	cands = append(cands, filepath.Join(root, "bin", "stamp-suite"))
	if p, err := exec.LookPath("stamp-suite"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		fi, err := os.Stat(c)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, c, "--version").Output()
		cancel()
		if err == nil && strings.Contains(string(out), Version) {
			return c
		}
		t.Logf("%s is not stamp-suite %s (%q, %v)", c, Version, bytes.TrimSpace(out), err)
	}
	t.Skipf("skipping: stamp-suite %s not installed (scripts/install-test-deps.sh builds it with cargo into %s)", Version, root)
	return ""
}

// NATChain makes A — R — B (nettest.NewChain) with R masquerading what A
// sends toward B, so B sees R's address (AddrRB), never A's.
func NATChain(t testing.TB) *nettest.Chain {
	t.Helper()
	c := nettest.NewChain(t)
	ipt, err := exec.LookPath("iptables")
	if err != nil {
		t.Skip("skipping: iptables not installed (needed for the SNAT router)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ipt, "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-o", "eth2", "-j", "MASQUERADE")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := c.R.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Skipf("skipping: cannot add a MASQUERADE rule here: %v: %s", err, out.String())
	}
	return c
}

// KeyFile writes a random 32-byte key as hex, owner-only (stamp-suite
// refuses key files others can read), and returns its path and the key.
func KeyFile(t testing.TB) (string, []byte) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "stamp.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(key)+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	return p, key
}

// AuthArgs are stamp-suite's flags for authenticated mode with keyPath
// (none when keyPath is empty).
func AuthArgs(keyPath string) []string {
	if keyPath == "" {
		return nil
	}
	return []string{"-A", "A", "--hmac-key-file", keyPath}
}

// Summary is the part of stamp-suite's JSON summary the tests read.
type Summary struct {
	Type            string  `json:"type"`
	PacketsSent     int     `json:"packets_sent"`
	PacketsReceived int     `json:"packets_received"`
	MedianRTTms     float64 `json:"median_rtt_ms"`
	Measurements    struct {
		TLV struct {
			HMAC struct {
				Verified int `json:"verified"`
				Failed   int `json:"failed"`
			} `json:"hmac"`
			ByType map[string]TLVCount `json:"by_type"`
		} `json:"tlv_validation"`
	} `json:"measurements"`
	OWD struct {
		ForwardMedianMs float64 `json:"forward_median_ms"`
		ReverseMedianMs float64 `json:"reverse_median_ms"`
	} `json:"owd"`
}

// TLVCount is how many reflected TLVs of one type stamp-suite saw, and
// with which flags.
type TLVCount struct {
	Observed int `json:"observed"`
	Flags    struct {
		U int `json:"unrecognized"`
		M int `json:"malformed"`
		I int `json:"integrity_failed"`
	} `json:"flags"`
}

// CoS is the Class of Service TLV's count (type 4).
func (s Summary) CoS() TLVCount { return s.Measurements.TLV.ByType["4"] }

// RunSender runs stamp-suite's sender in ns with args (which must ask for
// --output-format json) and returns its summary and the raw output. It
// fails t when the sender exits non-zero or prints no summary.
func RunSender(t testing.TB, ns *nettest.NS, bin string, args ...string) (Summary, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stamp-suite %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	var sum Summary
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s Summary
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Type == "summary" {
			sum = s
		}
	}
	if sum.Type != "summary" {
		t.Fatalf("stamp-suite printed no JSON summary\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}
	return sum, stdout.String()
}

// StartReflector runs a stateful stamp-suite reflector in c.B on port
// (authenticated with keyPath unless it is empty) and returns its address
// once it answers a test packet sent from c.A. It is killed in t.Cleanup.
func StartReflector(t testing.TB, c *nettest.Chain, bin string, port int, keyPath string) string {
	t.Helper()
	args := append([]string{"-i", "-S", c.AddrB.String(), "-o", strconv.Itoa(port), "--stateful-reflector"}, AuthArgs(keyPath)...)
	cmd := exec.Command(bin, args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := c.B.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stamp-suite reflector output:\n%s", logs.String())
		}
	})
	target := net.JoinHostPort(c.AddrB.String(), strconv.Itoa(port))
	var key []byte
	if keyPath != "" {
		var err error
		if key, err = stamp.ReadKeyFile(keyPath); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var res *probe.Result
		err := c.A.Do(func() error {
			var err error
			res, err = stamp.Prober{}.Run(context.Background(), probe.Spec{Kind: probe.KindStamp, Target: target, Count: 1,
				Timeout: probe.Duration(200 * time.Millisecond)}, probe.Env{AuthKey: key})
			return err
		})
		if err == nil && res.Packets.Received == 1 {
			return target
		}
		if time.Now().After(deadline) {
			t.Fatalf("stamp-suite reflector on %s did not answer within 10s (last: %v)\n%s", target, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
