package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/procfs"
)

// The server under test: started as a child process (or an outside one),
// waited for, and asked over its API; its CPU time and log read from outside.

// startServer runs `cnperf server` on SQLite in a temp dir, or uses
// c.server. It returns the address, the server's log file ("" for an
// outside server) and a stop function.
func startServer(ctx context.Context, c config, agents int) (addr, logPath string, pid int, stop func(), err error) {
	if c.server != "" {
		u, err := url.Parse(c.server)
		if err != nil || u.Host == "" {
			return "", "", 0, nil, fmt.Errorf("-server %q: want http://HOST:PORT", c.server)
		}
		return u.Host, "", 0, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "cnperf-serverbench-")
	if err != nil {
		return "", "", 0, nil, err
	}
	cleanup := func() {
		if !c.keep {
			os.RemoveAll(dir)
		}
	}
	addr, err = freeAddr()
	if err != nil {
		cleanup()
		return "", "", 0, nil, err
	}
	logPath = filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		cleanup()
		return "", "", 0, nil, err
	}
	srvCtx, srvCancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(srvCtx, c.bin, "server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "bench.db"), "--log-level", "warn",
		"--max-agents", strconv.Itoa(max(agents+1000, 20000)),
		"--plain-http", "--trust-agent-addrs") // loopback, simulated agents: TLS and their addresses are not what is measured
	cmd.Env = append(os.Environ(), "CNPERF_USER_TOKEN="+userTok, "CNPERF_AGENT_TOKEN="+agentTok)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the bench
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		srvCancel()
		logf.Close()
		cleanup()
		return "", "", 0, nil, fmt.Errorf("start %s server: %w", c.bin, err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- cmd.Wait() }()
	stop = func() {
		srvCancel()
		<-srvDone
		logf.Close()
		cleanup()
	}
	return addr, logPath, cmd.Process.Pid, stop, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (b *bench) waitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := b.hbClient.Get(b.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
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

// cpuTime returns the user+system CPU time process pid has used (0 when
// unknown).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	// utime and stime, in clock ticks (100 Hz).
	f, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	ut, err1 := procfs.Field(f, procfs.Utime)
	st, err2 := procfs.Field(f, procfs.Stime)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// countOffline counts the reaper's "agent offline" log lines.
func countOffline(path string) int {
	if path == "" {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="agent offline"`) {
			n++
		}
	}
	return n
}

func (b *bench) do(ctx context.Context, cl *http.Client, method, path, token string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, data)
	}
	return data, nil
}

// countAgents returns how many agents the server lists online, and
// offline.
func (b *bench) countAgents(ctx context.Context) (online, offline int, err error) {
	// A listing of 10,000 agents is a few MB: give it time, and a second
	// try, on a loaded machine.
	try := 30 * time.Second
	if b.listTimeout > 0 {
		try = b.listTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, 2*try)
	defer cancel()
	cl := &http.Client{Timeout: try}
	data, err := b.do(lctx, cl, "GET", "/api/v2/agents?all=1", userTok, nil)
	if err != nil && lctx.Err() == nil {
		data, err = b.do(lctx, cl, "GET", "/api/v2/agents?all=1", userTok, nil)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list agents: %w", err)
	}
	var as []api.Agent
	if err := json.Unmarshal(data, &as); err != nil {
		return 0, 0, err
	}
	for _, a := range as {
		if a.Status == "offline" {
			offline++
		} else {
			online++
		}
	}
	return online, offline, nil
}

// rssOf returns a process's resident and peak resident memory (VmRSS,
// VmHWM) in bytes (0 when unknown).
func rssOf(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			fmt.Sscan(strings.TrimPrefix(line, "VmRSS:"), &kb)
			rss = kb << 10
		case strings.HasPrefix(line, "VmHWM:"):
			fmt.Sscan(strings.TrimPrefix(line, "VmHWM:"), &kb)
			hwm = kb << 10
		}
	}
	return rss, hwm
}
