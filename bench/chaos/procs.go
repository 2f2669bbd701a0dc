package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a child process whose output is appended to a log file (a
// restarted process appends to the same one).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs argv with env added, its output appended to logPath; the
// child is SIGKILLed if the bench dies.
func start(logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to grace, then SIGKILLs.
func (p *proc) term(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// startServer starts the server on the store's database (plain HTTP: its
// traffic stays on the bench's bridge).
func (b *bench) startServer() error {
	p, err := start(filepath.Join(b.dir, "server.log"),
		[]string{"CNPERF_USER_TOKEN=" + userTok, "CNPERF_AGENT_TOKEN=" + agentTok},
		b.c.bin, "server", "--listen", b.listen, "--db", "sqlite:"+filepath.Join(b.store, "chaos.db"),
		"--plain-http", "--log-json")
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.server = p
	b.mu.Unlock()
	return nil
}

// startAgent starts agent a in its namespace (ip netns exec runs the
// agent itself in its place: its pid is the agent's).
func (b *bench) startAgent(a *agent) error {
	name := fmt.Sprintf("chaos-%d", a.i)
	p, err := start(a.log, []string{"CNPERF_AGENT_TOKEN=" + agentTok},
		"ip", "netns", "exec", a.ns, b.c.bin, "agent", "--server", "http://"+b.listen,
		"--pod-name", name, "--pod-namespace", "chaos", "--pod-uid", name+"-uid",
		"--pod-ip", a.ip, "--node-name", name+"-node", "--node-ip", a.ip,
		"--state-dir", a.state, "--log-json")
	if err != nil {
		return err
	}
	b.mu.Lock()
	a.p = p
	b.mu.Unlock()
	return nil
}

// stopAgents SIGTERMs every agent still running.
func (b *bench) stopAgents() {
	b.mu.Lock()
	var ps []*proc
	for _, a := range b.agents {
		if a.p != nil {
			ps = append(ps, a.p)
			a.p = nil
		}
	}
	b.mu.Unlock()
	for _, p := range ps {
		p.term(15 * time.Second)
	}
}

// stopAll stops the agents and the server.
func (b *bench) stopAll() {
	b.stopAgents()
	b.mu.Lock()
	p := b.server
	b.server = nil
	b.mu.Unlock()
	if p != nil {
		p.term(15 * time.Second)
	}
}

// waitReady waits until the server's /readyz answers 200.
func waitReady(ctx context.Context, base string, limit time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := hc.Get(base + "/readyz")
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
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
