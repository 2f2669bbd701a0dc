package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/stamp/stamptest"
)

// TestStampInteropCommands runs the commands as a user would,
// with the cnperf binary, through a router doing MASQUERADE (A — R — B):
// stamp-suite's sender in A against `cnperf respond --stamp` in B, and
// `cnperf probe stamp --json` in A against stamp-suite's reflector in B,
// both unauthenticated and authenticated, with --cos and DSCP 46 (EF).
func TestStampInteropCommands(t *testing.T) {
	ss := stamptest.Binary(t)
	c := stamptest.NATChain(t)
	bin := cnperftest.Binary(t)
	keyPath, _ := stamptest.KeyFile(t)
	for i, m := range []struct{ name, keyPath string }{{"open", ""}, {"authenticated", keyPath}} {
		t.Run("stamp-suite to cnperf respond/"+m.name, func(t *testing.T) {
			respPort, stampPort := 15201+i, 18620+i
			args := []string{"respond", "--listen", net.JoinHostPort(c.AddrB.String(), strconv.Itoa(respPort)), "--stamp", "--stamp-port", strconv.Itoa(stampPort)}
			if m.keyPath != "" {
				args = append(args, "--stamp-auth-key-file", m.keyPath)
			}
			resp := exec.Command(bin, args...)
			out := &cnperftest.SyncBuffer{}
			resp.Stdout, resp.Stderr = out, out
			if err := c.B.Start(resp); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = resp.Process.Kill()
				_ = resp.Wait()
			}()
			waitFor(t, func() bool { return strings.Contains(out.String(), "STAMP reflector") }, "cnperf respond --stamp to start:\n"+out.String())
			sargs := append([]string{"-r", c.AddrB.String(), "-p", strconv.Itoa(stampPort), "-c", "100", "-d", "10", "--cos", "--dscp", "46",
				"-L", "2", "--output-format", "json"}, stamptest.AuthArgs(m.keyPath)...)
			sum, raw := stamptest.RunSender(t, c.A, ss, sargs...)
			cos := sum.CoS()
			if sum.PacketsReceived != 100 || cos.Observed != 100 || cos.Flags.U+cos.Flags.M+cos.Flags.I != 0 {
				t.Fatalf("stamp-suite: %d of %d replies, CoS answered %d times (flags U %d M %d I %d); want 100, 100, no flags\n%s",
					sum.PacketsReceived, sum.PacketsSent, cos.Observed, cos.Flags.U, cos.Flags.M, cos.Flags.I, raw)
			}
			if m.keyPath != "" && sum.Measurements.TLV.HMAC.Verified != 100 {
				t.Errorf("stamp-suite verified %d HMAC TLVs, want 100", sum.Measurements.TLV.HMAC.Verified)
			}
			t.Logf("stamp-suite %s → cnperf respond: %d/%d replies, CoS answered %d, median RTT %.3f ms",
				strings.Join(sargs, " "), sum.PacketsReceived, sum.PacketsSent, cos.Observed, sum.MedianRTTms)
		})
		t.Run("cnperf probe stamp to stamp-suite/"+m.name, func(t *testing.T) {
			target := stamptest.StartReflector(t, c, ss, 20862+i, m.keyPath)
			args := []string{"probe", "stamp", "--to", target, "--count", "100", "--dscp", "EF", "--json"}
			if m.keyPath != "" {
				args = append(args, "--auth-key-file", m.keyPath)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := c.A.Start(cmd); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("cnperf %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
			var res probe.Result
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				t.Fatalf("decode: %v\n%s", err, stdout.String())
			}
			m := probe.Metrics(&res)
			for _, k := range []string{"rtt_ms.p50", "forward.delay_ms.p50", "reverse.delay_ms.p50", "forward.error_bound_ms",
				"forward.loss_pct", "reverse.loss_pct", "dscp_received", "reverse.dscp_received"} {
				if _, ok := m[k]; !ok {
					t.Errorf("no %s in the result:\n%s", k, stdout.String())
				}
			}
			if m["packets.received"] != 100 || m["dscp_received"] != 46 || m["reverse.dscp_received"] != 46 {
				t.Errorf("received %v, dscp forward %v, reverse %v; want 100, 46, 46", m["packets.received"], m["dscp_received"], m["reverse.dscp_received"])
			}
			t.Logf("cnperf %s: rtt_ms.p50 %.4f, forward.delay_ms.p50 %.4f, reverse.delay_ms.p50 %.4f (± %.0f ms), loss forward %v %% reverse %v %%, dscp_received %v, reverse.dscp_received %v",
				strings.Join(args, " "), m["rtt_ms.p50"], m["forward.delay_ms.p50"], m["reverse.delay_ms.p50"], m["forward.error_bound_ms"],
				m["forward.loss_pct"], m["reverse.loss_pct"], m["dscp_received"], m["reverse.dscp_received"])
		})
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
