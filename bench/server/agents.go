package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// The simulated agents: heartbeats over a lean client, long polls, task
// start and report, and the task creation the dispatch latency is timed on.

// leanConns bounds the heartbeat connections the simulated agents share.
const leanConns = 1024

// leanClient sends heartbeats over a pool of persistent HTTP/1.1
// connections with pre-built requests: the simulated agents' side costs a
// fraction of net/http's client, so the machine's CPU goes to the server
// being measured.
type leanClient struct {
	addr  string
	pool  chan *leanConn // idle connections
	slots chan struct{}  // a token per open connection (bounds them)
}

type leanConn struct {
	c  net.Conn
	br *bufio.Reader
}

// post sends one request and returns the status code; the body is read
// and dropped.
func (l *leanClient) post(path string, body []byte) (int, error) {
	var lc *leanConn
	select {
	case lc = <-l.pool:
	default:
		// No idle connection: open one if under the bound, else wait for
		// one to come back (the wait counts in the latency).
		select {
		case lc = <-l.pool:
		case l.slots <- struct{}{}:
			c, err := net.DialTimeout("tcp", l.addr, 5*time.Second)
			if err != nil {
				<-l.slots
				return 0, err
			}
			lc = &leanConn{c: c, br: bufio.NewReaderSize(c, 4096)}
		}
	}
	drop := func() { lc.c.Close(); <-l.slots }
	req := make([]byte, 0, 256+len(body))
	req = fmt.Appendf(req, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, l.addr, agentTok, len(body))
	req = append(req, body...)
	_ = lc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := lc.c.Write(req); err != nil {
		drop()
		return 0, err
	}
	resp, err := http.ReadResponse(lc.br, nil)
	if err != nil {
		drop()
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		drop()
		return resp.StatusCode, err
	}
	l.pool <- lc // never blocks: the pool holds as many as slots allow
	return resp.StatusCode, nil
}

func uid(i int) string { return fmt.Sprintf("bench-%05d", i) }

func podIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256) }

// agent simulates one agent: heartbeats at 1 Hz and a long poll, from a
// random phase within the ramp.
func (b *bench) agent(ctx context.Context, i int, ramp time.Duration) {
	hb, _ := json.Marshal(api.Heartbeat{PodName: "bench-pod-" + fmt.Sprint(i), PodNamespace: "bench", PodUID: uid(i), PodIP: podIP(i),
		NodeName: fmt.Sprintf("node-%d", i/20), NodeIP: podIP(i), ResponderAddr: podIP(i) + ":5201", Version: "bench"})
	delay := time.Duration(float64(ramp) * float64(i) / float64(b.agents))
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	first := make(chan struct{})
	wg.Go(func() {
		select {
		case <-first:
		case <-ctx.Done():
			return
		}
		b.poll(ctx, i)
	})
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev time.Time
	for n := 0; ; n++ {
		start := time.Now()
		if !prev.IsZero() && start.Sub(prev) > 1500*time.Millisecond && b.measuring.Load() {
			b.hbLate.Add(1) // a beat more than 0.5 s late: the agent fell behind
		}
		prev = start
		code, err := b.lean.post("/api/v2/agent/heartbeat", hb)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("heartbeat: HTTP %d", code)
		}
		if ctx.Err() != nil {
			return
		}
		d := time.Since(start)
		if b.measuring.Load() {
			if err != nil {
				b.hbErr.Add(1)
			} else {
				b.hbLat.add(d)
			}
		}
		if n == 0 && err == nil {
			close(first)
		} else if n == 0 {
			n = -1 // retry registration
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll long-polls for tasks; each task is started and reported at once.
func (b *bench) poll(ctx context.Context, i int) {
	q := url.Values{"pod_uid": {uid(i)}, "wait": {b.c.wait.String()}}
	path := "/api/v2/agent/tasks?" + q.Encode()
	for ctx.Err() == nil {
		data, err := b.do(ctx, b.lpClient, "GET", path, agentTok, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.fetchErr.Add(1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
			}
			continue
		}
		got := time.Now()
		var fr api.FetchReply
		if err := json.Unmarshal(data, &fr); err != nil {
			b.fetchErr.Add(1)
			continue
		}
		for _, t := range fr.Tasks {
			b.mu.Lock()
			created, ok := b.created[t.TaskID]
			delete(b.created, t.TaskID)
			if !ok {
				b.arrived[t.TaskID] = got
			}
			b.mu.Unlock()
			if ok {
				b.dispatch.add(got.Sub(created))
			}
			b.got.Add(1)
			b.finishTask(ctx, i, t.TaskID)
		}
	}
}

func (b *bench) finishTask(ctx context.Context, i int, taskID string) {
	start, _ := json.Marshal(api.StartRequest{PodUID: uid(i)})
	t0 := time.Now()
	_, err := b.do(ctx, b.hbClient, "POST", "/api/v2/agent/tasks/"+taskID+"/start", agentTok, start)
	if err == nil && b.measuring.Load() {
		b.otherLat.add(time.Since(t0))
	}
	rep, _ := json.Marshal(api.Report{TaskID: taskID, PodUID: uid(i), ReportID: "r-" + taskID, State: api.StateSucceeded, TaskResult: "simulated"})
	t0 = time.Now()
	_, err = b.do(ctx, b.hbClient, "POST", "/api/v2/agent/tasks/"+taskID+"/report", agentTok, rep)
	if err == nil && b.measuring.Load() {
		b.otherLat.add(time.Since(t0))
	}
}

// createTasks creates one ping task between two random agents at the
// configured rate, through the seed's v1 API.
func (b *bench) createTasks(ctx context.Context) {
	every := time.Duration(float64(time.Second) / b.c.taskRate)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		src := rand.IntN(b.agents)
		dst := (src + 1 + rand.IntN(b.agents-1)) % b.agents
		body, _ := json.Marshal([]api.TaskCreate{{SrcPodUID: uid(src), DstPodUID: uid(dst), TaskParam: "-c 1", TaskType: "ping"}})
		sent := time.Now()
		data, err := b.do(ctx, b.hbClient, "POST", "/api/v1/external/task/create", userTok, body)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintln(os.Stderr, "create task:", err)
			}
			continue
		}
		var env struct {
			Data []string `json:"data"`
		}
		if json.Unmarshal(data, &env) != nil || len(env.Data) != 1 {
			continue
		}
		id := env.Data[0]
		b.mu.Lock()
		if got, ok := b.arrived[id]; ok {
			delete(b.arrived, id)
			b.dispatch.add(got.Sub(sent))
		} else {
			b.created[id] = sent
		}
		b.mu.Unlock()
	}
}
