package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

// The simulated session agents: each holds its session with the agent's
// own client code (client.HoldSession, Session), takes offers, acks them,
// and starts and reports each task over the session.

// sourceAddrs spreads the sessions' connections over loopback source
// addresses: one address has about 28,000 ephemeral ports, 50,000
// sessions need more.
var sourceAddrs = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}

// sessionClient is the agent's API client with a transport that keeps one
// connection per session and spreads them over the source addresses (the
// only difference from an agent's: many agents share one process).
func sessionClient(base string) (*client.Client, error) {
	var next atomic.Uint64
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			src := sourceAddrs[next.Add(1)%uint64(len(sourceAddrs))]
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return client.New(base, agentTok, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: tr}))
}

// sessionAgent simulates one agent on a session, from a random phase
// within the ramp.
func (b *bench) sessionAgent(ctx context.Context, i int, ramp time.Duration) {
	hello := api.Heartbeat{PodName: "bench-pod-" + fmt.Sprint(i), PodNamespace: "bench", PodUID: uid(i), PodIP: podIP(i),
		NodeName: fmt.Sprintf("node-%d", i/20), NodeIP: podIP(i), ResponderAddr: podIP(i) + ":5201", Version: "bench",
		BootID: fmt.Sprintf("bench-boot-%d", i)}
	delay := time.Duration(float64(ramp) * float64(i) / float64(b.agents))
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	b.sessCl.HoldSession(ctx, client.SessionLoop{
		PodUID: uid(i),
		Hello:  func() api.Heartbeat { return hello },
		OnOffer: func(s *client.Session, fr api.FetchReply) {
			got := time.Now()
			ids := make([]string, 0, len(fr.Tasks))
			for _, t := range fr.Tasks {
				ids = append(ids, t.TaskID)
				b.arrive(t.TaskID, got)
			}
			if len(ids) == 0 {
				return
			}
			_ = s.Ack(ids)
			go b.finishSessionTasks(ctx, s, i, ids)
		},
		OnUp: func(s *client.Session) {
			b.sessUp.Add(1)
			_ = s.Pull()
		},
		OnDown: func(err error, held bool) {
			if b.measuring.Load() {
				b.sessDown.Add(1)
			}
		},
		OnKeepalive: func(rtt time.Duration, err error) {
			if !b.measuring.Load() {
				return
			}
			if err != nil {
				b.hbErr.Add(1)
				return
			}
			b.hbLat.add(rtt)
		},
	})
}

// arrive records a task's arrival at its agent.
func (b *bench) arrive(taskID string, got time.Time) {
	b.mu.Lock()
	created, ok := b.created[taskID]
	delete(b.created, taskID)
	if !ok {
		b.arrived[taskID] = got
	}
	b.mu.Unlock()
	if ok {
		b.dispatch.add(got.Sub(created))
	}
	b.got.Add(1)
}

// finishSessionTasks starts and reports each task over the session, then
// asks for more.
func (b *bench) finishSessionTasks(ctx context.Context, s *client.Session, i int, ids []string) {
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		err := s.Start(cctx, id)
		if err == nil && b.measuring.Load() {
			b.otherLat.add(time.Since(t0))
		}
		t0 = time.Now()
		_, err = s.Report(cctx, api.Report{TaskID: id, PodUID: uid(i), ReportID: "r-" + id, State: api.StateSucceeded, TaskResult: "simulated"})
		if err == nil && b.measuring.Load() {
			b.otherLat.add(time.Since(t0))
		}
		cancel()
	}
	_ = s.Pull()
}
