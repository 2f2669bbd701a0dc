package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
)

// A simulator: a child process of the cluster hold (serverbench
// -sim-child) that holds a slice of the agents' sessions, each on one
// replica, from one loopback source address. One process cannot hold
// 50,000 connections under a 20,000 open-file hard limit, and one source
// address has about 28,000 ephemeral ports (the dialer binds it, so the
// port is unique per address whatever the destination), so the hold runs
// several.
//
// Protocol with the parent, one line each way:
//   - stdin "status": answer a simReport without latencies;
//   - stdin "measure": start recording keep-alive latencies and losses,
//     answer as to "status";
//   - stdin "report": stop recording, answer a simReport with them and
//     the tasks' arrivals;
//   - stdin closed (the parent ended, however it ended): close every
//     session and exit.

// simReport is a simulator's answer, one JSON line on stdout.
type simReport struct {
	Up          int64   `json:"up"`            // sessions open now
	UpPerServer []int64 `json:"up_per_server"` // by the index of -sim-servers
	Opened      int64   `json:"opened"`        // sessions welcomed since the start
	Lost        int64   `json:"lost"`          // held sessions that ended while recording
	FailedOpen  int64   `json:"failed_open"`   // opens that failed while recording
	KAErrors    int64   `json:"ka_errors"`     // keep-alives that failed while recording
	RTTMicros   []int64 `json:"rtt_us"`        // keep-alive round trips while recording
	// Why sessions ended or could not open since the start (the error's
	// text without digits, so alike errors count together), and how often.
	DownReasons map[string]int64 `json:"down_reasons,omitempty"`
	// Arrivals is when each task offered since the start reached its
	// agent (task id → Unix nanoseconds), with "report".
	Arrivals map[string]int64 `json:"arrivals,omitempty"`
	// Periods counts the open sessions by the keep-alive period their
	// server asks of them now (seconds), with "report".
	Periods   map[string]int64 `json:"periods,omitempty"`
	Answered  int64            `json:"answered"`      // tasks started and reported
	AnswerErr int64            `json:"answer_errors"` // starts or reports that failed
}

// simState is a simulator's counters.
type simState struct {
	measuring  atomic.Bool
	up         atomic.Int64
	upPer      []atomic.Int64
	opened     atomic.Int64
	lost       atomic.Int64
	failedOpen atomic.Int64
	kaErrors   atomic.Int64
	answered   atomic.Int64
	answerErr  atomic.Int64
	open       []atomic.Pointer[client.Session] // each agent's open session (by index from simFirst)
	mu         sync.Mutex                       // guards rtts, reasons and arrivals
	rtts       []int64
	reasons    map[string]int64
	arrivals   map[string]int64
}

// runSimChild holds agents [simFirst, simFirst+simCount) on the servers
// listed in simServers (agent i on server i mod len), dialing from
// simSrc, ramped over c.holdRamp, until stdin closes.
func runSimChild(c config) error {
	if _, err := raiseNoFile(uint64(c.simCount + 2048)); err != nil {
		return fmt.Errorf("raise the open-file limit: %w", err)
	}
	servers := strings.Split(c.simServers, ",")
	var clients []*client.Client
	for _, s := range servers {
		cl, err := simClient(s, c.simSrc)
		if err != nil {
			return err
		}
		clients = append(clients, cl)
	}
	st := &simState{upPer: make([]atomic.Int64, len(servers)), reasons: map[string]int64{}, arrivals: map[string]int64{},
		open: make([]atomic.Pointer[client.Session], c.simCount)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for k := range c.simCount {
		i := c.simFirst + k
		delay := time.Duration(float64(c.holdRamp) * float64(k) / float64(c.simCount))
		wg.Go(func() { st.hold(ctx, clients[i%len(clients)], i%len(clients), i, &st.open[k], delay) })
	}
	enc := json.NewEncoder(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "status":
			if err := enc.Encode(st.report(false)); err != nil {
				return err
			}
		case "measure":
			st.mu.Lock()
			st.rtts = st.rtts[:0]
			st.mu.Unlock()
			st.lost.Store(0)
			st.failedOpen.Store(0)
			st.kaErrors.Store(0)
			st.measuring.Store(true)
			if err := enc.Encode(st.report(false)); err != nil {
				return err
			}
		case "report":
			st.measuring.Store(false)
			if err := enc.Encode(st.report(true)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("simulator: unknown command %q", sc.Text())
		}
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	return nil
}

func (st *simState) report(withRTT bool) simReport {
	r := simReport{Up: st.up.Load(), Opened: st.opened.Load(), Lost: st.lost.Load(),
		FailedOpen: st.failedOpen.Load(), KAErrors: st.kaErrors.Load()}
	for i := range st.upPer {
		r.UpPerServer = append(r.UpPerServer, st.upPer[i].Load())
	}
	st.mu.Lock()
	if withRTT {
		r.RTTMicros = append([]int64(nil), st.rtts...)
		r.Arrivals = maps.Clone(st.arrivals)
		r.Periods = map[string]int64{}
		for i := range st.open {
			if s := st.open[i].Load(); s != nil {
				r.Periods[fmt.Sprint(s.KeepalivePeriod().Seconds())]++
			}
		}
	}
	r.Answered, r.AnswerErr = st.answered.Load(), st.answerErr.Load()
	r.DownReasons = maps.Clone(st.reasons)
	st.mu.Unlock()
	return r
}

// hold keeps agent i's session on one server, from delay on.
func (st *simState) hold(ctx context.Context, cl *client.Client, server, i int, open *atomic.Pointer[client.Session], delay time.Duration) {
	hello := api.Heartbeat{PodName: "bench-pod-" + fmt.Sprint(i), PodNamespace: "bench", PodUID: uid(i), PodIP: podIP(i),
		NodeName: fmt.Sprintf("node-%d", i/20), NodeIP: podIP(i), ResponderAddr: podIP(i) + ":5201", Version: "bench",
		BootID: fmt.Sprintf("bench-boot-%d", i),
		// A responder's secret, as a real agent's hello carries: a probe
		// task's source gets its test key from it (the server waits up
		// to 3 s for a destination's secret it does not know).
		ResponderKey: fmt.Sprintf("%064x", i+1)}
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	var up atomic.Bool
	cl.HoldSession(ctx, client.SessionLoop{
		PodUID: uid(i),
		Hello:  func() api.Heartbeat { return hello },
		OnOffer: func(s *client.Session, fr api.FetchReply) {
			got := time.Now().UnixNano()
			ids := make([]string, 0, len(fr.Tasks))
			var runFor time.Duration
			st.mu.Lock()
			for _, t := range fr.Tasks {
				ids = append(ids, t.TaskID)
				if t.Spec != nil {
					runFor = max(runFor, time.Duration(t.Spec.Duration))
				}
				st.arrivals[t.TaskID] = got
			}
			st.mu.Unlock()
			if len(ids) == 0 {
				return
			}
			_ = s.Ack(ids)
			go st.answer(ctx, s, i, ids, runFor)
		},
		OnUp: func(s *client.Session) {
			open.Store(s)
			up.Store(true)
			st.up.Add(1)
			st.upPer[server].Add(1)
			st.opened.Add(1)
			_ = s.Pull()
		},
		OnDown: func(err error, held bool) {
			if err != nil && ctx.Err() == nil {
				st.reason(err)
			}
			open.Store(nil)
			wasUp := up.Swap(false)
			if wasUp {
				st.up.Add(-1)
				st.upPer[server].Add(-1)
			}
			if st.measuring.Load() && ctx.Err() == nil {
				if wasUp {
					st.lost.Add(1)
				} else {
					st.failedOpen.Add(1)
				}
			}
		},
		OnKeepalive: func(rtt time.Duration, err error) {
			if !st.measuring.Load() {
				return
			}
			if err != nil {
				st.kaErrors.Add(1)
				return
			}
			st.mu.Lock()
			st.rtts = append(st.rtts, rtt.Microseconds())
			st.mu.Unlock()
		},
	})
}

// answer starts each task and, once the test's duration has passed (as
// an agent's test takes it), reports a synthetic TCP result over the
// session (the matrix's figures: 10 Gbit/s each way), then asks for more.
func (st *simState) answer(ctx context.Context, s *client.Session, i int, ids []string, runFor time.Duration) {
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second+runFor)
		err := s.Start(cctx, id)
		if err == nil {
			select {
			case <-cctx.Done():
			case <-time.After(runFor):
			}
		}
		if err == nil {
			now := time.Now()
			res, _ := json.Marshal(probe.Result{Kind: probe.KindTCP, Tool: "cnperf", Src: podIP(i), StartedAt: now.Add(-time.Second), DurationS: 1,
				ThroughputBps: &probe.SenderReceiver{Sender: 10e9, Receiver: 10e9}})
			_, err = s.Report(cctx, api.Report{TaskID: id, PodUID: uid(i), ReportID: "r-" + id, State: api.StateSucceeded, Result: res})
		}
		cancel()
		if err != nil {
			st.answerErr.Add(1)
			if ctx.Err() == nil {
				st.reason(fmt.Errorf("answer a task: %w", err))
			}
			continue
		}
		st.answered.Add(1)
	}
	_ = s.Pull()
}

// reason counts why a session ended or could not open.
func (st *simState) reason(err error) {
	msg := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, err.Error())
	if len(msg) > 160 {
		msg = msg[:160]
	}
	st.mu.Lock()
	if _, ok := st.reasons[msg]; ok || len(st.reasons) < 50 {
		st.reasons[msg]++
	}
	st.mu.Unlock()
}

// simClient is the agent's API client for one server, dialing from src.
func simClient(base, src string) (*client.Client, error) {
	ip := net.ParseIP(src)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("simulator source address %q: want a loopback address", src)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return client.New(base, agentTok, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: tr}))
}
