package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// Bounds on stopping processes at Down.
const (
	termGrace = 3 * time.Second // SIGTERM to SIGKILL
	killWait  = 2 * time.Second // SIGKILL to giving up
	pollEvery = 10 * time.Millisecond
)

// ProcessRecord is a process the lab started, as kept in the state file.
type ProcessRecord struct {
	PID int `json:"pid"`
	// StartTicks is field 22 of /proc/PID/stat, so a reused pid is not
	// taken for the lab's process.
	StartTicks uint64    `json:"start_ticks"`
	NS         string    `json:"ns"`
	Argv       []string  `json:"argv"`
	Log        string    `json:"log,omitempty"`
	StartedAt  time.Time `json:"started_at"`
}

// procTable reaps the processes this Lab value started.
type procTable struct {
	mu   sync.Mutex            // guards done
	done map[int]chan struct{} // closed when the child has been reaped
}

func newProcTable() *procTable { return &procTable{done: map[int]chan struct{}{}} }

// StartProcess starts argv inside the lab namespace nsName (the underlay,
// a node or a pod namespace) in its own session, with env as its
// environment (nil: this process's) and stdout and stderr appended to
// logFile ("" discards them). argv[0] is looked up in PATH; nothing goes
// through a shell. The pid is recorded in the state file and Down stops
// the process (SIGTERM, then SIGKILL after 3 s). The process outlives the
// caller; Lab.Down or the package's Down stops it.
func (l *Lab) StartProcess(nsName string, argv []string, env []string, logFile string) (*ProcessRecord, error) {
	recs, err := l.StartProcesses([]ProcessSpec{{NS: nsName, Argv: argv, Env: env, Log: logFile}})
	if err != nil {
		return nil, err
	}
	return &recs[0], nil
}

// ProcessSpec is one process for StartProcesses: argv run in the lab
// namespace NS with Env (nil: this process's), output appended to Log.
type ProcessSpec struct {
	NS   string
	Argv []string
	Env  []string
	Log  string
}

// startWorkers bounds the processes StartProcesses forks at once: forks
// serialise in the kernel and in Go's fork lock anyway, a few workers
// overlap the namespace switches, log opens and /proc reads around them.
const startWorkers = 4

// StartProcesses starts every spec as StartProcess does, a few at once,
// and records them all in the state file with one write, not one per
// process (a 32x4 lab's 160 agents rewrote a growing state file 160 times,
// under the directory lock, one after another). A process that fails to
// start stops the batch: those started are recorded (Down stops them;
// Down also finds the lab's processes by namespace, so a crash between
// start and record leaks nothing) and the error names the failing one.
func (l *Lab) StartProcesses(specs []ProcessSpec) ([]ProcessRecord, error) {
	recs := make([]ProcessRecord, len(specs))
	errs := make([]error, len(specs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(startWorkers, len(specs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				recs[i], errs[i] = l.spawn(specs[i])
			}
		}()
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	var started []ProcessRecord
	for i := range specs {
		if errs[i] == nil {
			started = append(started, recs[i])
		}
	}
	var serr error
	if len(started) > 0 {
		serr = withDirLock(l.stateDir, func() error {
			// Merge with records other processes may have added.
			if cur, lerr := load(stateFile(l.stateDir, l.Name)); lerr == nil {
				l.Processes = cur.Processes
			}
			l.Processes = append(l.Processes, started...)
			return l.save()
		})
	}
	if serr != nil {
		for _, r := range started {
			_ = syscall.Kill(r.PID, syscall.SIGKILL)
		}
		return nil, fmt.Errorf("record %d processes: %w", len(started), serr)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return recs, nil
}

// spawn starts one process in its namespace and has it reaped; it does
// not record it.
func (l *Lab) spawn(sp ProcessSpec) (ProcessRecord, error) {
	nsName, argv, env, logFile := sp.NS, sp.Argv, sp.Env, sp.Log
	if len(argv) == 0 {
		return ProcessRecord{}, errors.New("start process: empty command")
	}
	if !slices.Contains(l.Namespaces, nsName) {
		return ProcessRecord{}, fmt.Errorf("start process: %s is not a namespace of lab %s", nsName, l.Name)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return ProcessRecord{}, fmt.Errorf("start process: %w", err)
	}
	out, err := os.Open(os.DevNull)
	if err != nil {
		return ProcessRecord{}, err
	}
	if logFile != "" {
		_ = out.Close()
		if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
			return ProcessRecord{}, fmt.Errorf("log dir: %w", err)
		}
		out, err = os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return ProcessRecord{}, fmt.Errorf("open log: %w", err)
		}
	}
	defer out.Close()
	// Long-lived by design: the lab's server and agents run until Down,
	// which bounds them; so no context here.
	cmd := exec.Command(path, argv[1:]...) //nolint:gosec // argv from the caller, no shell
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return ProcessRecord{}, fmt.Errorf("open netns %s: %w", nsName, err)
	}
	err = nsthread.Do(ns, nsName, cmd.Start)
	_ = ns.Close()
	if err != nil {
		return ProcessRecord{}, fmt.Errorf("start %s in %s: %w", argv[0], nsName, err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	l.procs.mu.Lock()
	l.procs.done[pid] = done
	l.procs.mu.Unlock()
	go func() { // reaps the child; Down waits on done
		_ = cmd.Wait()
		close(done)
	}()
	ticks, _ := startTicks(pid)
	l.log.Debug("lab process started", "lab", l.Name, "ns", nsName, "pid", pid, "argv", argv)
	return ProcessRecord{PID: pid, StartTicks: ticks, NS: nsName, Argv: slices.Clone(argv), Log: logFile, StartedAt: time.Now().UTC()}, nil
}

// procStat returns a process's state letter and start time in ticks.
func procStat(pid int) (state byte, ticks uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	ticks, err = strconv.ParseUint(f[19], 10, 64) // field 22 overall
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat start time: %w", pid, err)
	}
	return f[0][0], ticks, nil
}

func startTicks(pid int) (uint64, error) {
	_, t, err := procStat(pid)
	return t, err
}

// alive says whether pid still runs and is the process with startTicks
// (0 matches any). Zombies count as gone.
func alive(pid int, ticks uint64) bool {
	st, t, err := procStat(pid)
	if err != nil || st == 'Z' || st == 'X' {
		return false
	}
	return ticks == 0 || t == ticks
}

// victim is a process to stop.
type victim struct {
	pid   int
	ticks uint64
}

// processesIn finds processes whose network namespace is one of nsNames
// (by the namespaces' inodes), other than this process.
func processesIn(nsNames []string) []victim {
	inodes := map[uint64]bool{}
	for _, n := range nsNames {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(netnsDir, n), &st); err == nil {
			inodes[st.Ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []victim
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/"+e.Name()+"/ns/net", &st); err != nil {
			continue
		}
		if inodes[st.Ino] {
			t, _ := startTicks(pid)
			out = append(out, victim{pid, t})
		}
	}
	return out
}

// stopProcesses sends SIGTERM to every victim, waits up to termGrace,
// sends SIGKILL to those left and waits up to killWait. It returns the
// pids signalled and an error naming any that survived.
func stopProcesses(ctx context.Context, vs []victim) ([]int, error) {
	var pids []int
	seen := map[int]bool{}
	var live []victim
	for _, v := range vs {
		if seen[v.pid] || !alive(v.pid, v.ticks) {
			continue
		}
		seen[v.pid] = true
		if err := syscall.Kill(v.pid, syscall.SIGTERM); err == nil {
			pids = append(pids, v.pid)
			live = append(live, v)
		}
	}
	live = waitGone(ctx, live, termGrace)
	for _, v := range live {
		_ = syscall.Kill(v.pid, syscall.SIGKILL)
	}
	live = waitGone(ctx, live, killWait)
	if len(live) > 0 {
		var left []string
		for _, v := range live {
			left = append(left, strconv.Itoa(v.pid))
		}
		return pids, fmt.Errorf("processes survived SIGKILL: %s", strings.Join(left, ", "))
	}
	return pids, nil
}

// waitGone polls until every process is gone or the bound passes, and
// returns those still alive.
func waitGone(ctx context.Context, vs []victim, bound time.Duration) []victim {
	deadline := time.Now().Add(bound)
	for {
		vs = slices.DeleteFunc(vs, func(v victim) bool { return !alive(v.pid, v.ticks) })
		if len(vs) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return vs
		}
		time.Sleep(pollEvery)
	}
}
