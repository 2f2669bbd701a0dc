package k8stest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// run runs a short command and returns its error with its output.
func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = pathEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

// output runs a short command and returns its standard output.
func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = pathEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return string(b), nil
}

func pathEnv() []string {
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(env, "PATH="+os.Getenv("PATH")+":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin")
}

func nsenter(ns string, args ...string) []string {
	return append([]string{"nsenter", "--net=/var/run/netns/" + ns, "--"}, args...)
}

// start starts a long-running component with its output in a log file.
func (c *Cluster) start(name string, argv ...string) (*proc, error) {
	return c.startSupervised(name, nil, argv...)
}

// maxRestarts bounds how often startSupervised restarts one component.
const maxRestarts = 20

// startSupervised starts a long-running component as start does and, as a
// DaemonSet's kubelet would, starts it again (after a second, into the same
// log) whenever it exits with one of restartOn: Felix exits with 129 to
// apply a changed setting and expects to be restarted. Any other exit, a
// stop, or more than maxRestarts restarts end it.
func (c *Cluster) startSupervised(name string, restartOn []int, argv ...string) (*proc, error) {
	return c.startSupervisedEnv(name, restartOn, nil, argv...)
}

// startSupervisedEnv is startSupervised with env added to the component's
// environment (a PATH there replaces the harness's).
func (c *Cluster) startSupervisedEnv(name string, restartOn []int, env []string, argv ...string) (*proc, error) {
	logDir := filepath.Join(c.RunDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	launch := func() (*exec.Cmd, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(pathEnv(), env...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		pf, err := os.OpenFile(filepath.Join(c.RunDir, "pids"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(pf, "%d %s\n", cmd.Process.Pid, argv0(argv))
			pf.Close()
		}
		return cmd, nil
	}
	cmd, err := launch()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		defer close(p.done)
		defer f.Close()
		for {
			err := cmd.Wait()
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			p.mu.Lock()
			again := !p.stopping && slices.Contains(restartOn, code) && p.restarts < maxRestarts
			p.mu.Unlock()
			if again {
				fmt.Fprintf(f, "\n--- harness: %s exited with %d; restarting it in 1s\n", name, code)
				time.Sleep(time.Second)
				p.mu.Lock()
				if !p.stopping {
					if next, lerr := launch(); lerr == nil {
						cmd, p.cmd = next, next
						p.restarts++
						p.mu.Unlock()
						continue
					} else {
						err = lerr
					}
				}
				p.mu.Unlock()
			}
			p.err = err
			return
		}
	}()
	c.procs = append(c.procs, p)
	return p, nil
}

// argv0 is the program a process runs (after nsenter's arguments).
func argv0(argv []string) string {
	if argv[0] == "nsenter" {
		for i, a := range argv {
			if a == "--" && i+1 < len(argv) {
				return argv[i+1]
			}
		}
	}
	return argv[0]
}

// exited lists components that died, with the end of their logs.
func (c *Cluster) exited() string {
	var b strings.Builder
	for _, p := range c.procs {
		select {
		case <-p.done:
			data, _ := os.ReadFile(p.log)
			fmt.Fprintf(&b, "\n--- %s exited (%v); end of its log:\n%s", p.name, p.err, tail(string(data), 2500))
		default:
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// poll calls fn every interval until it returns nil, ctx ends or timeout
// passes; the error then carries fn's last error.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = fn(); last == nil {
			return nil
		}
		if x := c.exited(); x != "" {
			return fmt.Errorf("%s: %v%s", what, last, x)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %v: %v", what, timeout, last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
func rank(name string) int {
	switch {
	case strings.HasSuffix(name, "kubelet"), strings.HasSuffix(name, "kube-proxy"):
		return 0
	case strings.HasSuffix(name, "containerd"):
		return 1
	case name == "etcd":
		return 3
	}
	return 2
}

func stopProc(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	p.stopping = true
	pgid := p.cmd.Process.Pid
	p.mu.Unlock()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// stop stops one component and forgets it (so that a component stopped on
// purpose is not reported as one that died).
func (c *Cluster) stop(p *proc) {
	stopProc(p)
	c.procs = slices.DeleteFunc(c.procs, func(q *proc) bool { return q == p })
}
