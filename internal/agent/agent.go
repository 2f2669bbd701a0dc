package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

// Defaults of Options.
const (
	DefaultResponderPort  = 5201
	DefaultMaxParallel    = 4
	DefaultHeartbeatEvery = time.Second
	DefaultPollWait       = 25 * time.Second
	// DefaultShutdownGrace bounds the last deliveries when the agent stops.
	DefaultShutdownGrace = 5 * time.Second
)

// Options configure an Agent. Client, Identity and Probers are required.
type Options struct {
	// Client talks to the server with the agent token.
	Client   *client.Client
	Identity Identity
	// Probers runs v2 probe tasks; Handlers are the responder's side of
	// each kind.
	Probers  *probe.Registry
	Handlers []engine.Handler
	// ResponderPort is the responder's TCP and UDP port on the pod IP
	// (DefaultResponderPort when 0; -1 picks a free port, for tests).
	ResponderPort int
	// StampPort is the STAMP reflector's own UDP port on the pod IP
	// (stamp.DefaultPort, 862, when 0; -1: none). The responder's port
	// reflects STAMP whatever this says; a port that cannot be bound (862
	// needs CAP_NET_BIND_SERVICE) is logged, not fatal.
	StampPort int
	// MaxParallel bounds the tasks run at once (DefaultMaxParallel when 0).
	MaxParallel    int
	HeartbeatEvery time.Duration // DefaultHeartbeatEvery when 0
	PollWait       time.Duration // long-poll wait asked of the server
	ShutdownGrace  time.Duration // DefaultShutdownGrace when 0
	// NoSession makes the agent poll the REST endpoints only (a heartbeat
	// a second and a long poll), never opening a session (session.go).
	NoSession bool
	// ResponderSecret is the secret the responder's test keys derive from
	// (probe.ResponderSecretLen bytes; nil: a random one per start, which
	// is what agents use — tests set it to derive keys themselves).
	ResponderSecret []byte
	// StateDir keeps what must survive a restart: the outbox of results
	// not yet delivered (StateDir/outbox). "" keeps them in memory only.
	StateDir string
	Version  string
	Logger   *slog.Logger
}

// Agent runs tasks for the server. Create it with New and call Run once.
type Agent struct {
	opts Options
	id   Identity
	cl   *client.Client
	log  *slog.Logger

	slots   chan struct{} // a token per running task (capacity MaxParallel)
	qosSlot chan struct{} // held by the task whose QoS set-up is applied
	freed   chan struct{} // wakes the fetch loop when a queued task starts or ends
	ready   chan struct{} // closed when the responder listens and a heartbeat was accepted

	bootID string // chosen at New: a new process, a new ID
	// secret is the responder's key secret: the server derives each
	// task's test key from it, the responder checks them with it.
	secret []byte

	mu       sync.Mutex      // guards jobs, done, stopping and respAddr
	jobs     map[string]*job // task id → queued or running task
	done     doneSet         // tasks finished by this process: never started again
	stopping bool            // set by cancelAll: no new tasks
	respAddr string

	beats atomic.Int64 // heartbeats built (REST, frames, hellos)

	out     *outbox
	servers *serverSet
	link    *link // the session while one is held, else REST (session.go)
	sess    sessionState
	jobWG   sync.WaitGroup // running task goroutines
}

// New checks opts and returns an agent.
func New(opts Options) (*Agent, error) {
	if opts.Client == nil {
		return nil, errors.New("agent: no server client")
	}
	if opts.Probers == nil {
		return nil, errors.New("agent: no probe registry")
	}
	id := opts.Identity
	if err := id.Complete(); err != nil {
		return nil, err
	}
	if opts.ResponderPort == 0 {
		opts.ResponderPort = DefaultResponderPort
	}
	if opts.ResponderPort < -1 || opts.ResponderPort > 65535 {
		return nil, fmt.Errorf("agent: responder port %d out of range 1-65535", opts.ResponderPort)
	}
	if opts.StampPort == 0 {
		opts.StampPort = stamp.DefaultPort
	}
	if opts.StampPort < -1 || opts.StampPort > 65535 {
		return nil, fmt.Errorf("agent: stamp port %d out of range 1-65535", opts.StampPort)
	}
	if opts.MaxParallel == 0 {
		opts.MaxParallel = DefaultMaxParallel
	}
	if opts.MaxParallel < 1 || opts.MaxParallel > 256 {
		return nil, fmt.Errorf("agent: max parallel %d out of range 1-256", opts.MaxParallel)
	}
	if opts.HeartbeatEvery <= 0 {
		opts.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if opts.PollWait <= 0 {
		opts.PollWait = DefaultPollWait
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	secret := opts.ResponderSecret
	if secret == nil {
		secret = probe.NewResponderSecret()
	}
	if len(secret) != probe.ResponderSecretLen {
		return nil, fmt.Errorf("agent: responder secret of %d bytes, want %d", len(secret), probe.ResponderSecretLen)
	}
	log := opts.Logger.With("pod_uid", id.PodUID)
	a := &Agent{
		opts:    opts,
		id:      id,
		cl:      opts.Client,
		log:     log,
		slots:   make(chan struct{}, opts.MaxParallel),
		qosSlot: make(chan struct{}, 1),
		freed:   make(chan struct{}, 1),
		ready:   make(chan struct{}),
		jobs:    map[string]*job{},
		bootID:  uuid.NewString(),
		secret:  append([]byte(nil), secret...),
	}
	outDir := ""
	if opts.StateDir != "" {
		outDir = filepath.Join(opts.StateDir, "outbox")
	}
	a.link = &link{cl: a.cl}
	a.out = newOutbox(a.link, log, outDir)
	a.out.changed = func() { signal(a.sess.listsChanged) }
	a.servers = newServerSet(a.link, id, log)
	a.sess.init(opts.NoSession)
	return a, nil
}

// Ready is closed once the responder listens and the server accepted a
// heartbeat.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// ResponderAddr returns the responder's HOST:PORT once Run has bound it.
func (a *Agent) ResponderAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.respAddr
}

// Run serves until ctx ends, then stops everything it started and returns
// nil; it returns an error only when the agent cannot start (the
// responder's address is taken, for example).
func (a *Agent) Run(ctx context.Context) error {
	// Results a previous process finished are delivered first, and their
	// tasks are never started again.
	if err := a.out.load(); err != nil {
		return err
	}
	port := a.opts.ResponderPort
	if port == -1 {
		port = 0
	}
	resp := engine.NewResponder(a.log, a.opts.Handlers...)
	// The responder serves only scheduled tests: a session must carry the
	// test key the server gave its task (derived from a.secret).
	resp.RequireKeys(probe.NewDerivedKeys(a.secret))
	// The STAMP reflector answers on the responder's UDP port (so a stamp
	// task targets the responder address like every other kind) and on
	// its own port for other tools. Open (unauthenticated): STAMP packets
	// name no task, so a per-task key cannot be chosen for them (see
	// docs/probes.md).
	refl, err := stamp.NewReflector(stamp.ReflectorOptions{Logger: a.log})
	if err != nil {
		return fmt.Errorf("agent: stamp reflector: %w", err)
	}
	resp.HandleUnclaimed(refl.Unclaimed())
	listen := net.JoinHostPort(a.id.PodIP, strconv.Itoa(port))
	if err := resp.Listen(ctx, listen); err != nil {
		return fmt.Errorf("agent: start responder: %w", err)
	}
	stampOn := false
	if a.opts.StampPort > 0 {
		saddr := net.JoinHostPort(a.id.PodIP, strconv.Itoa(a.opts.StampPort))
		if err := refl.Listen(ctx, saddr); err != nil {
			a.log.Warn("no STAMP reflector on its own port; the responder port still reflects STAMP", "err", err)
		} else {
			stampOn = true
		}
	}
	a.mu.Lock()
	a.respAddr = resp.Addr().String()
	a.mu.Unlock()

	// Deliveries outlive ctx by the shutdown grace: they get their own
	// context, cancelled after the last task reported.
	outCtx, outCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer outCancel()
	var bg sync.WaitGroup
	bg.Go(func() {
		if err := resp.Serve(ctx); err != nil {
			a.log.Error("responder stopped", "err", err)
		}
	})
	if stampOn {
		bg.Go(func() {
			if err := refl.Serve(ctx); err != nil {
				a.log.Error("stamp reflector stopped", "err", err)
			}
		})
	}
	bg.Go(func() { a.out.run(outCtx) })
	if !a.opts.NoSession {
		bg.Go(func() { a.holdSession(ctx) })
	}
	bg.Go(func() { a.heartbeatLoop(ctx) })
	bg.Go(func() { a.fetchLoop(ctx) })

	<-ctx.Done()
	a.log.Info("agent stopping", "tasks", a.jobCount())
	a.cancelAll(errShutdown)
	a.jobWG.Wait() // every task has queued its report
	a.servers.closeAll()
	a.out.drain(a.opts.ShutdownGrace)
	outCancel()
	_ = resp.Close()
	_ = refl.Close()
	bg.Wait()
	a.log.Info("agent stopped", "undelivered", a.out.len())
	return nil
}

// maxUndeliveredListed is the most undelivered task ids one heartbeat
// lists (the server's limit).
const maxUndeliveredListed = 1000

// heartbeat builds the agent's heartbeat.
func (a *Agent) heartbeat() api.Heartbeat {
	a.beats.Add(1)
	return api.Heartbeat{
		PodName: a.id.PodName, PodNamespace: a.id.PodNamespace, PodUID: a.id.PodUID, PodIP: a.id.PodIP,
		NodeName: a.id.NodeName, NodeIP: a.id.NodeIP, HostNetwork: a.id.HostNetwork, NodeLabels: a.id.NodeLabels,
		ResponderAddr: a.ResponderAddr(), Version: a.opts.Version, Running: a.jobIDs(), BootID: a.bootID,
		ResponderKey: hex.EncodeToString(a.secret),
		Undelivered:  a.out.taskIDs(maxUndeliveredListed),
	}
}

// heartbeatLoop keeps the server's view of the agent current. Without a
// session (polling, or while one is being opened) it beats every
// HeartbeatEvery. With one held, presence is the session's keep-alives,
// and the loop sends a heartbeat frame only when the running or
// undelivered lists change (a task taken or ended, a result queued or
// delivered), at most one a HeartbeatEvery: an idle agent is not woken
// once a second to find nothing changed. The reply's Cancel stops tasks.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	failing := false
	server := "" // the server (replica) in use at the last beat
	for {
		beat := time.Now()
		s, current, rest := a.sessionBeat(ctx)
		if rest {
			a.restBeat(ctx, &failing)
		}
		if base := a.cl.Base(); base != server {
			if server != "" {
				a.log.Info("agent moved to another server", "server", base, "from", server)
			}
			server = base
		}
		if s != nil && current {
			select {
			case <-ctx.Done():
				return
			case <-s.Done():
				continue
			case <-a.sess.listsChanged:
			}
		}
		wait := a.opts.HeartbeatEvery - time.Since(beat)
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// restBeat sends one heartbeat over REST (no session is held); *failing
// keeps whether the last one failed, to log changes only.
func (a *Agent) restBeat(ctx context.Context, failing *bool) {
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	reply, err := a.cl.Heartbeat(bctx, a.heartbeat())
	cancel()
	switch {
	case err != nil && ctx.Err() == nil:
		if !*failing {
			a.log.Warn("heartbeat failed; retrying every beat", "err", err)
		}
		*failing = true
	case err == nil:
		if *failing {
			a.log.Info("heartbeat accepted again")
		}
		*failing = false
		a.markReady()
		if len(reply.Cancel) > 0 {
			a.cancelTasks(reply.Cancel, errCancelledByServer)
		}
	}
}

func (a *Agent) markReady() {
	select {
	case <-a.ready:
	default:
		close(a.ready)
		a.log.Info("agent ready", "pod", a.id.PodName, "node", a.id.NodeName, "pod_ip", a.id.PodIP,
			"responder", a.ResponderAddr(), "server", a.cl.Base(), "max_parallel", a.opts.MaxParallel)
	}
}

// fetchLoop long-polls for work while fewer than MaxParallel tasks wait
// for a slot, so that tasks are not taken from the server (where their
// deadline starts) only to wait here.
func (a *Agent) fetchLoop(ctx context.Context) {
	// The server answers a fetch by an agent it has no heartbeat from with
	// 404: poll once the first heartbeat was accepted.
	select {
	case <-a.ready:
	case <-ctx.Done():
		return
	}
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		for a.queued() >= a.opts.MaxParallel {
			select {
			case <-ctx.Done():
				return
			case <-a.freed:
			}
		}
		if a.sessionPull(ctx) {
			continue // a session carries the offers
		}
		pctx, stop := a.sess.pollContext(ctx)
		fr, err := a.cl.Fetch(pctx, a.id.PodUID, a.opts.PollWait)
		// Read before stop, which cancels pctx itself: a failed fetch
		// is tried again at once only when a session ended the poll.
		sessionUp := pctx.Err() != nil
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if sessionUp {
				continue // a session came up: it carries the offers now
			}
			a.log.Warn("fetch tasks failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		if len(fr.Cancel) > 0 {
			a.cancelTasks(fr.Cancel, errCancelledByServer)
		}
		for _, req := range fr.Serve {
			a.servers.start(ctx, req)
		}
		for _, t := range fr.Tasks {
			a.accept(ctx, t)
		}
	}
}

func (a *Agent) signalFreed() {
	select {
	case a.freed <- struct{}{}:
	default:
	}
}
