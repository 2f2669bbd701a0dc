// Command chaos (make bench-chaos) runs a real `cnperf server` on SQLite
// and real `cnperf agent` processes, each agent in its own network
// namespace on a bridge the bench makes, and creates a run of short tasks
// (-tasks, 1,000 by default) through the API at a steady rate while a
// chaos schedule SIGKILLs and restarts agents, partitions agents for 5-60
// s (their bridge port down: a black hole both ways), SIGKILLs and
// restarts the server on the same store, and fills the store's
// filesystem (a size-limited tmpfs the bench mounts) for a while. Then it
// heals everything, waits for every task to end, and checks the store
// against the agents' own ledger (their JSON logs: "task started" is an
// execution, "task finished" a result the agent's outbox held; and their
// outbox and dead-letter directories): every task ended, no result an
// agent produced missing from the store, no task executed twice. It prints
// the figures and exits non-zero when one of the three fails.
//
// The files follow its concerns: main.go the flags and the run, netlab.go
// the namespaces and the bridge, procs.go the processes, chaos.go the
// schedule, tasks.go the task creation, verify.go the ledger, the store
// and the figures.
//
// It needs root (namespaces, a mount); without it, it says so and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
)

const (
	userTok  = "chaos-bench-user"
	agentTok = "chaos-bench-agent"
)

// config holds the flags.
type config struct {
	bin        string
	agents     int
	tasks      int
	runSize    int
	rate       float64
	chaosEvery time.Duration
	seed       uint64
	diskMB     int
	subnet     string
	endWait    time.Duration
	keep       bool
	events     string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "cnperf", "bin/cnperf", "the cnperf binary to run the server and agents with")
	flag.IntVar(&c.agents, "agents", 8, "agents, each in its own network namespace (2-50)")
	flag.IntVar(&c.tasks, "tasks", 1000, "tasks to create")
	flag.IntVar(&c.runSize, "run-size", 5, "tasks per run")
	flag.Float64Var(&c.rate, "rate", 1.7, "tasks created per second")
	flag.DurationVar(&c.chaosEvery, "chaos-every", 20*time.Second, "mean time between chaos events")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock); printed so a run can be repeated")
	flag.IntVar(&c.diskMB, "disk-mb", 64, "size of the store's tmpfs in MiB")
	flag.StringVar(&c.subnet, "subnet", "10.251.0", "the bridge's /24 (first three octets): the server on .1, agents from .10")
	flag.DurationVar(&c.endWait, "end-wait", 5*time.Minute, "after the chaos, how long tasks may take to end")
	flag.StringVar(&c.events, "events", "agent-kill,partition,server-kill,disk-full", "the kinds of chaos event, comma-separated")
	flag.BoolVar(&c.keep, "keep", false, "keep the temp dir (logs, state dirs; the store's tmpfs is unmounted)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Println("bench-chaos: skipped: needs root (network namespaces, a bridge and a tmpfs mount)")
		return
	}
	if c.agents < 2 || c.agents > 50 || c.tasks < 1 || c.runSize < 1 || c.rate <= 0 || c.chaosEvery <= 0 || c.diskMB < 16 {
		fmt.Fprintln(os.Stderr, "bench-chaos: want -agents 2-50, -tasks, -run-size and -rate above 0, -chaos-every above 0, -disk-mb 16 or more")
		os.Exit(2)
	}
	kinds := map[string]bool{}
	for _, e := range strings.Split(c.events, ",") {
		k, ok := eventNames[strings.TrimSpace(e)]
		if !ok {
			fmt.Fprintf(os.Stderr, "bench-chaos: -events: unknown kind %q (want agent-kill, partition, server-kill, disk-full)\n", e)
			os.Exit(2)
		}
		kinds[k] = true
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	// Its own lock beside the benchmarks' (which make holds): two runs
	// would share the bridge's and namespaces' names.
	unlock, err := lockRun()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-chaos:", err)
		os.Exit(1)
	}
	defer unlock()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, c, kinds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-chaos:", err)
		unlock()
		os.Exit(1)
	}
	if !ok {
		unlock()
		os.Exit(1)
	}
}

// runLock is held by a chaos run.
const runLock = "/tmp/cnperf-chaos.lock"

// lockRun takes runLock, refusing when another run holds it.
func lockRun() (func(), error) {
	f, err := os.OpenFile(runLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another chaos run holds %s: %w", runLock, err)
	}
	return func() { f.Close() }, nil
}

// bench is one chaos run.
type bench struct {
	c      config
	kinds  map[string]bool // the chaos events to make
	dir    string          // temp dir: logs, agents' state dirs
	store  string          // the tmpfs mount point holding the database
	listen string          // the server's HOST:PORT on the bridge
	cl     *client.Client
	lab    *netlab

	rmu sync.Mutex // guards rng
	rng *rand.Rand

	mu      sync.Mutex // guards what follows
	server  *proc
	agents  []*agent
	storeOn map[string]bool // the server kill or disk fill under way
	fig     figures
}

// agent is one agent of the run.
type agent struct {
	i     int
	ns    string
	ip    string
	hostV string // its veth's end on the bridge
	state string // its --state-dir
	log   string
	p     *proc
	busy  bool // a chaos event holds it
}

func (b *bench) randN(n int) int {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	return b.rng.IntN(n)
}

// randDur is a duration in [lo, hi].
func (b *bench) randDur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(b.randN(int(hi-lo)/int(time.Millisecond)+1))*time.Millisecond
}

func run(ctx context.Context, c config, kinds map[string]bool) (bool, error) {
	if _, err := os.Stat(c.bin); err != nil {
		return false, fmt.Errorf("the cnperf binary: %w (make build makes bin/cnperf)", err)
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return false, err
	}
	c.bin = bin
	dir, err := os.MkdirTemp("", "cnperf-chaos-")
	if err != nil {
		return false, err
	}
	if c.keep {
		fmt.Println("temp dir kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{c: c, kinds: kinds, dir: dir, rng: rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))}
	b.fig.started = time.Now()
	fmt.Printf("bench-chaos: %d agents, %d tasks in runs of %d at %.2f/s, a chaos event every ~%v, seed %d, store on a %d MiB tmpfs\n",
		c.agents, c.tasks, c.runSize, c.rate, c.chaosEvery, c.seed, c.diskMB)

	// The store's filesystem.
	b.store = filepath.Join(dir, "store")
	if err := mountStore(b.store, c.diskMB); err != nil {
		return false, err
	}
	defer func() {
		if err := unmountStore(b.store); err != nil {
			fmt.Fprintln(os.Stderr, "bench-chaos: cleanup:", err)
		}
	}()

	// The network.
	b.lab = &netlab{subnet: c.subnet, n: c.agents}
	b.lab.cleanStale()
	if err := b.lab.up(); err != nil {
		b.lab.down()
		return false, err
	}
	defer b.lab.down()

	port, err := freePort(b.lab.serverIP())
	if err != nil {
		return false, err
	}
	b.listen = fmt.Sprintf("%s:%d", b.lab.serverIP(), port)
	base := "http://" + b.listen
	b.cl, err = client.New(base, userTok, client.WithRequestTimeout(10*time.Second))
	if err != nil {
		return false, err
	}
	if err := b.startServer(); err != nil {
		return false, err
	}
	defer b.stopAll()
	if err := waitReady(ctx, base, 60*time.Second); err != nil {
		return false, fmt.Errorf("server: %w (log %s)", err, filepath.Join(dir, "server.log"))
	}
	for i := range c.agents {
		a := &agent{i: i, ns: b.lab.ns(i), ip: b.lab.agentIP(i), hostV: b.lab.hostVeth(i),
			state: filepath.Join(dir, fmt.Sprintf("agent-%d-state", i)), log: filepath.Join(dir, fmt.Sprintf("agent-%d.log", i))}
		b.agents = append(b.agents, a)
		if err := b.startAgent(a); err != nil {
			return false, err
		}
	}
	if err := b.waitAgentsOnline(ctx, 60*time.Second); err != nil {
		return false, err
	}
	fmt.Printf("server on %s and %d agents online after %v\n", b.listen, c.agents, time.Since(b.fig.started).Round(time.Millisecond))

	// The run under chaos.
	chaosCtx, stopChaos := context.WithCancel(ctx)
	var events sync.WaitGroup
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		b.chaos(chaosCtx, ctx, &events)
	}()
	createErr := b.createTasks(ctx)
	stopChaos()
	<-chaosDone
	events.Wait() // every event heals what it broke
	b.fig.chaosEnded = time.Now()
	if createErr != nil {
		return false, createErr
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	fmt.Printf("tasks created (%v); chaos over: %d events; waiting for every task to end\n",
		b.fig.chaosEnded.Sub(b.fig.started).Round(time.Second), b.fig.eventCount())

	// Everything healed: the server and every agent up.
	if err := waitReady(ctx, base, 60*time.Second); err != nil {
		return false, fmt.Errorf("server after the chaos: %w", err)
	}
	tasks, waitErr := b.waitTasksEnd(ctx, c.endWait)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	b.waitOutboxesEmpty(ctx, 60*time.Second)
	b.stopAgents() // SIGTERM: their logs complete
	led, err := b.readLedger()
	if err != nil {
		return false, err
	}
	ok := b.verify(tasks, led, waitErr)
	return ok, nil
}

// waitAgentsOnline waits until the server lists every agent online.
func (b *bench) waitAgentsOnline(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		as, err := b.cl.Agents(ctx, false)
		online := 0
		if err == nil {
			for _, a := range as {
				if a.Status != "offline" {
					online++
				}
			}
		}
		if online >= b.c.agents {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents online after %v (err %v; logs in %s)", online, b.c.agents, limit, err, b.dir)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var errNotEnded = errors.New("tasks not ended")
