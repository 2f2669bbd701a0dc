// Command idle measures an idle agent's footprint, the cost an owner pays
// for an agent that waits for work: it starts `cnperf server` on SQLite and
// `cnperf agent` with its responder and STAMP reflector on loopback, waits
// until the agent holds its session, lets it settle, and then reads the
// agent's CPU ticks (/proc/PID/stat utime+stime), its RSS (VmRSS, and the
// peak VmHWM) and its threads' context switches over -measure (60 s by
// default). It prints them beside the targets: at most 0.05 % of a core
// and 25 MB RSS. Run it with `make bench-idle`.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/procfs"
)

// The targets (issue 31, item 5).
const (
	targetCorePct = 0.05
	targetRSSMB   = 25.0
)

// clockTicks is USER_HZ, the unit of /proc's utime and stime: 100 on
// every Linux architecture Go builds for.
const clockTicks = 100

const (
	userTok  = "idle-bench-user-token"
	agentTok = "idle-bench-agent-token"
)

func main() {
	bin := flag.String("cnperf", "bin/cnperf", "the cnperf binary to measure")
	measure := flag.Duration("measure", 60*time.Second, "how long the idle agent is measured")
	settle := flag.Duration("settle", 5*time.Second, "wait after the session opens before measuring")
	keep := flag.Bool("keep", false, "keep the temp dir (logs, database)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *measure, *settle, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench-idle:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin string, measure, settle time.Duration, keep bool) error {
	if measure <= 0 || settle < 0 {
		return fmt.Errorf("-measure %v, -settle %v: want a positive measure and a settle of 0 or more", measure, settle)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("the cnperf binary: %w (make build makes bin/cnperf)", err)
	}
	dir, err := os.MkdirTemp("", "cnperf-idlebench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("temp dir kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	addr, err := freePort("tcp")
	if err != nil {
		return err
	}
	// The server serves HTTPS, as every install does by default, so the
	// agent's keep-alives cost what they cost on a node.
	tlsDir := filepath.Join(dir, "tls")
	caFile := filepath.Join(tlsDir, "ca.crt")
	srv, err := start(ctx, dir, "server", bin, []string{"CNPERF_USER_TOKEN=" + userTok, "CNPERF_AGENT_TOKEN=" + agentTok},
		"server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "idle.db"), "--log-level", "warn",
		"--tls-dir", tlsDir)
	if err != nil {
		return err
	}
	defer srv.stop()
	base := "https://" + addr
	if err := waitReady(ctx, base, caFile, 60*time.Second); err != nil {
		return fmt.Errorf("server: %w (log %s)", err, srv.log)
	}
	stampAddr, err := freePort("udp")
	if err != nil {
		return err
	}
	_, stampPort, _ := net.SplitHostPort(stampAddr)
	ag, err := start(ctx, dir, "agent", bin, []string{"CNPERF_AGENT_TOKEN=" + agentTok},
		"agent", "--server", base, "--ca-file", caFile, "--pod-name", "idle-agent", "--pod-namespace", "bench", "--pod-uid", "idle-agent-uid",
		"--pod-ip", "127.0.0.1", "--node-name", "idle-node", "--node-ip", "127.0.0.1",
		"--responder-port", "0", "--stamp-port", stampPort, "--state-dir", filepath.Join(dir, "agent-state"))
	if err != nil {
		return err
	}
	defer ag.stop()
	t0 := time.Now()
	if err := waitLog(ctx, ag, "agent session open", 60*time.Second); err != nil {
		return fmt.Errorf("agent: %w (log %s)", err, ag.log)
	}
	fmt.Printf("agent session open %v after the agent started; settling %v, then measuring %v\n",
		time.Since(t0).Round(time.Millisecond), settle, measure)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	before, err := sample(ag.pid())
	if err != nil {
		return err
	}
	wall := time.Now()
	peakRSS := before.rssKB
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(wall) < measure {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ag.done:
			return fmt.Errorf("the agent exited while measured (log %s)", ag.log)
		case <-tick.C:
		}
		if s, err := sample(ag.pid()); err == nil {
			peakRSS = max(peakRSS, s.rssKB)
		}
	}
	after, err := sample(ag.pid())
	if err != nil {
		return err
	}
	secs := time.Since(wall).Seconds()
	ticks := after.ticks - before.ticks
	corePct := 100 * float64(ticks) / clockTicks / secs
	rssMB := float64(after.rssKB) / 1024
	switches := after.ctxSwitches - before.ctxSwitches
	fmt.Printf("\nidle agent (%s, %.1f MB binary; pid %d) over %.1f s with its session, keep-alives, responder and STAMP reflector:\n",
		bin, float64(fi.Size())/1e6, ag.pid(), secs)
	fmt.Printf("  %-28s %10s   %s\n", "figure", "measured", "target")
	fmt.Printf("  %-28s %10d   (%.1f a minute)\n", "CPU clock ticks (1/100 s)", ticks, float64(ticks)*60/secs)
	fmt.Printf("  %-28s %9.3f%%   at most %.2f%%  %s\n", "CPU, share of one core", corePct, targetCorePct, verdict(corePct <= targetCorePct))
	fmt.Printf("  %-28s %7.1f MB   at most %.0f MB  %s\n", "RSS at the end", rssMB, targetRSSMB, verdict(rssMB <= targetRSSMB))
	fmt.Printf("  %-28s %7.1f MB   (sampled each second: %.1f MB)\n", "RSS peak since start (VmHWM)", float64(after.hwmKB)/1024, float64(max(peakRSS, after.rssKB))/1024)
	fmt.Printf("  %-28s %10d   (%.2f a second: the agent's wake-ups)\n", "context switches, all threads", switches, float64(switches)/secs)
	fmt.Printf("  %-28s %10d\n", "threads", after.threads)
	return nil
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// proc is a child process with its log file.
type proc struct {
	cmd    *exec.Cmd
	log    string
	done   chan struct{}
	cancel context.CancelFunc
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	p.cancel()
	<-p.done
}

// start runs bin with args, its output in DIR/NAME.log; it is sent
// SIGTERM when stopped and SIGKILL if the bench dies.
func start(ctx context.Context, dir, name, bin string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		f.Close()
		return nil, fmt.Errorf("start %s %s: %w", bin, name, err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{}), cancel: cancel}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// getTrusting makes one GET with a 2 s bound that trusts only the CA in
// caFile (an error until the server has written it).
func getTrusting(url, caFile string) (*http.Response, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return hc.Get(url)
}

func freePort(network string) (string, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.LocalAddr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls /readyz over HTTPS, trusting the CA the server writes
// to caFile on its first start.
func waitReady(ctx context.Context, base, caFile string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := getTrusting(base+"/readyz", caFile)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitLog waits until p's log holds text.
func waitLog(ctx context.Context, p *proc, text string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), text) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before its log said %q", text)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its log did not say %q within %v", text, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// usage is what /proc says of a process at one moment.
type usage struct {
	ticks        uint64 // utime + stime
	rssKB, hwmKB uint64
	ctxSwitches  uint64 // voluntary + involuntary, summed over its threads
	threads      int
}

func sample(pid int) (usage, error) {
	var u usage
	f, err := procfs.ReadStat(pid)
	if err != nil {
		return u, err
	}
	ut, err1 := procfs.Field(f, procfs.Utime)
	st, err2 := procfs.Field(f, procfs.Stime)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	u.ticks = ut + st
	status, err := statusFields(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	u.rssKB, u.hwmKB = status["VmRSS"], status["VmHWM"]
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	u.threads = len(tasks)
	for _, t := range tasks {
		if s, err := statusFields(t); err == nil {
			u.ctxSwitches += s["voluntary_ctxt_switches"] + s["nonvoluntary_ctxt_switches"]
		}
	}
	return u, nil
}

// statusFields reads the numeric fields of a /proc status file (kB
// figures in kB).
func statusFields(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		if n, err := strconv.ParseUint(fs[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}
