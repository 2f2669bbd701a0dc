package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/certs"
)

// Defaults of the lab's control plane.
const (
	// DefaultResponderPort is where every agent's responder listens.
	DefaultResponderPort = 5201
	// agentStartTimeout bounds the wait for the server and for all agents
	// to register; it grows with the lab (see startTimeout).
	agentStartTimeout = 20 * time.Second
)

// CnperfOptions say how to start the lab's control plane.
type CnperfOptions struct {
	// Binary is the cnperf executable to run in the namespaces (default:
	// this process's executable).
	Binary string
	// Dir holds the SQLite database, the processes' logs and the token
	// file (default: the state directory's NAME.d).
	Dir string
	// HostAgents starts one host-network agent per node in the node's
	// namespace (for node-node measurements). Default true via
	// StartCnperf's callers; false leaves them out.
	HostAgents bool
	// LogLevel is passed to the server and agents (default "info").
	LogLevel string
	// DB is the server's SQLite file (default Dir/cnperf.db). A file that
	// exists is opened again, so the runs of several labs can share it.
	DB string
}

// ControlPlane is the lab's running cnperf server and agents.
type ControlPlane struct {
	// URL is the server's base URL as the lab's members reach it
	// (https://UNDERLAY_IP:8080).
	URL string
	// CAFile is the PEM file of the lab's own CA, which signed the
	// server's certificate (agents and clients verify with it); "" for a
	// lab started before the lab used TLS.
	CAFile string
	// UserToken authorises users of the API; AgentToken the agents.
	UserToken, AgentToken string
	// Dir holds the database, logs and the token file.
	Dir string
	// Agents is how many agents were started (and registered).
	Agents int
	// Elapsed is how long StartCnperf took from its start until the
	// server listed every agent online with a heartbeat of this start.
	Elapsed time.Duration

	lab *Lab
}

// CnperfRecord is the control plane as the state file keeps it; the user
// token is in Dir/user.env (mode 0600), not in the state file.
type CnperfRecord struct {
	URL    string `json:"url"`
	Dir    string `json:"dir"`
	Agents int    `json:"agents"`
}

// ControlPlane returns the running control plane of a lab started with
// StartCnperf (in this or an earlier process), with the user token read
// from its token file.
func (l *Lab) ControlPlane() (*ControlPlane, error) {
	if l.Cnperf == nil {
		return nil, fmt.Errorf("lab %s runs no cnperf server (it was brought up without one)", l.Name)
	}
	data, err := os.ReadFile(filepath.Join(l.Cnperf.Dir, "user.env"))
	if err != nil {
		return nil, fmt.Errorf("lab %s: read token: %w", l.Name, err)
	}
	cp := &ControlPlane{URL: l.Cnperf.URL, Dir: l.Cnperf.Dir, Agents: l.Cnperf.Agents, lab: l}
	for _, line := range strings.Split(string(data), "\n") {
		// CNPERF_TOKEN: a user.env written before the variables were
		// split by role.
		for _, name := range []string{"CNPERF_USER_TOKEN=", "CNPERF_TOKEN="} {
			if v, ok := strings.CutPrefix(line, name); ok && cp.UserToken == "" {
				cp.UserToken = v
			}
		}
		if v, ok := strings.CutPrefix(line, "CNPERF_CA_FILE="); ok {
			cp.CAFile = v
		}
	}
	if cp.UserToken == "" {
		return nil, fmt.Errorf("lab %s: no CNPERF_USER_TOKEN in %s", l.Name, filepath.Join(l.Cnperf.Dir, "user.env"))
	}
	return cp, nil
}

// HostAgentName is the pod name of node's host-network agent ("n1-host").
func HostAgentName(node string) string { return node + "-host" }

// StartCnperf starts the cnperf server (SQLite) in the underlay namespace
// and one agent in every pod, plus, when o.HostAgents, one host-network
// agent in every node namespace, all through the real API with random
// tokens. It returns when the server answers and every agent has
// registered, or with an error naming what did not come up (and the tail
// of its log). The processes are recorded in the state file, so Down stops
// them even after a crash.
func (l *Lab) StartCnperf(ctx context.Context, o CnperfOptions) (*ControlPlane, error) {
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the cnperf binary: %w", err)
		}
		o.Binary = exe
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(l.stateDir, l.Name+".d")
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	began := time.Now()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("control plane dir: %w", err)
	}
	// The server serves HTTPS with a certificate from the lab's own CA
	// (made afresh for each start, valid for a month), so tokens do not
	// cross the lab's network in clear, as in a cluster.
	host, _, err := net.SplitHostPort(l.Underlay.ServerAddr)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", l.Underlay.ServerAddr, err)
	}
	tlsFiles, err := certs.WriteServer(o.Dir, []string{host}, 30*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("lab TLS certificate: %w", err)
	}
	cp := &ControlPlane{URL: "https://" + l.Underlay.ServerAddr, CAFile: tlsFiles.CA, UserToken: randomToken(), AgentToken: randomToken(), Dir: o.Dir, lab: l}
	tokens := fmt.Sprintf("CNPERF_SERVER=%s\nCNPERF_USER_TOKEN=%s\nCNPERF_CA_FILE=%s\n", cp.URL, cp.UserToken, cp.CAFile)
	if err := os.WriteFile(filepath.Join(o.Dir, "user.env"), []byte(tokens), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "CNPERF_LOG_LEVEL=" + o.LogLevel}
	port := strconv.Itoa(DefaultServerPort)
	db := o.DB
	if db == "" {
		db = filepath.Join(o.Dir, "cnperf.db")
	}
	// A database that exists may hold credentials of an earlier lab's
	// agents of the same names, which must be revoked; a new one holds
	// none, and 160 revoke calls are then time for nothing.
	_, statErr := os.Stat(db)
	dbExisted := statErr == nil
	srvLog := filepath.Join(o.Dir, "server.log")
	srvEnv := append(append([]string(nil), base...), "CNPERF_USER_TOKEN="+cp.UserToken, "CNPERF_AGENT_TOKEN="+cp.AgentToken)
	if _, err := l.StartProcess(l.Underlay.NS, []string{o.Binary, "server", "--listen", "0.0.0.0:" + port, "--db", "sqlite:" + db,
		"--tls-cert", tlsFiles.Cert, "--tls-key", tlsFiles.Key}, srvEnv, srvLog); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	c, err := cp.Client()
	if err != nil {
		return nil, err
	}
	wait := startTimeout(len(l.Pods) + len(l.Nodes))
	if err := waitHealthy(ctx, c, wait); err != nil {
		return nil, fmt.Errorf("cnperf server in %s did not come up: %w%s", l.Underlay.NS, err, logTail(srvLog))
	}
	type member struct{ ns, log string }
	var started []member
	uids := map[string]bool{}
	// Only heartbeats of this start count: a database kept from an earlier
	// lab (cni-compare runs one lab per backend on one database) holds the
	// same agents, heartbeating until a moment ago. The server stamps
	// heartbeats with its own clock, in microseconds, when they arrive, so
	// no slack is needed (a second of it let the previous lab's agents
	// count as up, and the first tasks met a responder not yet listening).
	since := time.Now()
	var specs []ProcessSpec
	var agentUIDs, agentStates []string
	agent := func(ns, name, podIP, node, nodeIP string, host bool) {
		env := append(append([]string(nil), base...), "CNPERF_AGENT_TOKEN="+cp.AgentToken,
			"POD_NAME="+name, "POD_NAMESPACE=cnperf-lab", "POD_UID="+l.Name+"-"+name,
			"POD_IP="+podIP, "NODE_NAME="+node, "NODE_IP="+nodeIP)
		// Each agent joins with the join token and keeps its own
		// credential in its state directory, as on a bare host.
		uid := l.Name + "-" + name
		stateDir := filepath.Join(o.Dir, "agents", name)
		argv := []string{o.Binary, "agent", "--server", cp.URL, "--ca-file", cp.CAFile, "--responder-port", strconv.Itoa(DefaultResponderPort),
			"--state-dir", stateDir}
		if host {
			argv = append(argv, "--host-network")
		}
		lf := filepath.Join(o.Dir, "agent-"+name+".log")
		specs = append(specs, ProcessSpec{NS: ns, Argv: argv, Env: env, Log: lf})
		agentUIDs = append(agentUIDs, uid)
		agentStates = append(agentStates, stateDir)
		started = append(started, member{ns, lf})
		uids[uid] = true
	}
	for _, p := range l.Pods {
		n, _ := l.Node(p.Node)
		agent(p.NS, p.Name, p.IP.Addr().String(), n.Name, n.IP.Addr().String(), false)
	}
	if o.HostAgents {
		for _, n := range l.Nodes {
			agent(n.NS, HostAgentName(n.Name), n.IP.Addr().String(), n.Name, n.IP.Addr().String(), true)
		}
	}
	if err := freshCredentials(ctx, c, agentStates, agentUIDs, dbExisted); err != nil {
		return nil, err
	}
	// All agents start at once and are recorded with one state write:
	// started one by one, each with its own revoke call and state-file
	// rewrite, a 32x4 lab's 160 agents took 8 s to come up (docs/lab.md).
	if _, err := l.StartProcesses(specs); err != nil {
		return nil, fmt.Errorf("start agents: %w", err)
	}
	cp.Agents = len(started)
	if err := waitAgents(ctx, c, uids, since, wait); err != nil {
		var tails []string
		for _, m := range started {
			if t := logTail(m.log); t != "" {
				tails = append(tails, t)
				break // one log says enough; they all run the same binary
			}
		}
		return nil, fmt.Errorf("agents of lab %s did not register: %w%s (logs in %s)", l.Name, err, strings.Join(tails, ""), o.Dir)
	}
	cp.Elapsed = time.Since(began)
	err = withDirLock(l.stateDir, func() error {
		if cur, lerr := load(stateFile(l.stateDir, l.Name)); lerr == nil {
			l.Processes = cur.Processes
		}
		l.Cnperf = &CnperfRecord{URL: cp.URL, Dir: cp.Dir, Agents: cp.Agents}
		return l.save()
	})
	if err != nil {
		return nil, fmt.Errorf("record control plane: %w", err)
	}
	l.log.Info("lab control plane up", "lab", l.Name, "server", cp.URL, "agents", cp.Agents, "elapsed", cp.Elapsed.Round(time.Millisecond))
	return cp, nil
}

// freshCredentials clears each agent's state directory and, when the
// database existed before this start (kept with --db, or the lab's own
// from an earlier start), forgets any credential the server holds for its
// uid (that database has the credential of the agent an earlier lab of
// this name started): each start's agents are new processes, as new pods
// are, and join afresh. The forget calls run a few at once.
func freshCredentials(ctx context.Context, c *client.Client, stateDirs, uids []string, forget bool) error {
	for i, d := range stateDirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("agent state of %s: %w", uids[i], err)
		}
	}
	if !forget {
		return nil
	}
	errs := make([]error, len(uids))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(forgetWorkers, len(uids)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = forgetCredential(ctx, c, uids[i])
			}
		}()
	}
	for i := range uids {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// forgetWorkers bounds the forget calls freshCredentials makes at once
// (the client keeps 4 idle connections to the server).
const forgetWorkers = 4

// forgetCredential deletes the earlier credential of uid (a revoked one
// would keep the uid from joining again).
func forgetCredential(ctx context.Context, c *client.Client, uid string) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.ForgetAgent(rctx, uid); err != nil && api.StatusOf(err) != http.StatusNotFound {
		return fmt.Errorf("forget the earlier credential of %s: %w", uid, err)
	}
	return nil
}

// Client returns an API client that reaches the server from this process:
// its connections are opened inside the underlay namespace, so no route
// from the host into the lab is needed.
func (cp *ControlPlane) Client() (*client.Client, error) {
	ns := cp.lab.Underlay.NS
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := Do(ns, func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	hc := &http.Client{Timeout: client.DefaultTimeout, Transport: &http.Transport{
		DialContext: dial, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
	}}
	return client.New(cp.URL, cp.UserToken, client.WithHTTPClient(hc), client.WithCAFile(cp.CAFile))
}

// startTimeout grows with the number of agents: a 2-core machine starts a
// few dozen processes a second.
func startTimeout(agents int) time.Duration {
	return agentStartTimeout + time.Duration(agents)*200*time.Millisecond
}

func waitHealthy(ctx context.Context, c *client.Client, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Agents(cctx, true)
		ccancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", bound, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitAgents waits until every agent in uids has sent a heartbeat since
// since (a database kept from an earlier lab holds the same agents from
// before).
func waitAgents(ctx context.Context, c *client.Client, uids map[string]bool, since time.Time, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	have := 0
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		as, err := c.Agents(cctx, false)
		ccancel()
		if err == nil {
			have = 0
			for _, a := range as {
				if uids[a.PodUID] && a.Status != "offline" && !a.LastHeartbeat.Before(since) {
					have++
				}
			}
			if have >= len(uids) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d registered after %v", have, len(uids), bound)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of a log, for error messages.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "\n--- " + path + " ---\n" + strings.Join(lines, "\n")
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}
