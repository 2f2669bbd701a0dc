package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// replicaLog is what the fronts of all replicas saw, by task and by agent,
// on agent sessions and on the REST paths of agents that poll.
type replicaLog struct {
	mu       sync.Mutex                // guards every field below
	handed   map[string][]time.Time    // task id → times an offer or fetch answer carried it
	started  map[string]time.Time      // task id → first start call seen (the agent starts it)
	reports  map[string]map[string]int // task id → report id → answers 2xx
	stored   map[string]int            // task id → reports stored (not duplicates)
	starts   map[string]int            // task id → start calls answered 2xx
	held     map[string]int            // agent uid → front of its last welcomed session
	movedAt  map[string]time.Time      // agent uid → first session welcomed at another front after the kill
	polled   map[string]int            // agent uid → REST heartbeats answered 2xx after the kill (its fallback)
	sessions []int                     // sessions welcomed, by front
	killed   int                       // the front whose replica was killed (-1: none yet)
	startCh  chan struct{}             // signalled at each first start seen
}

func newReplicaLog(fronts int) *replicaLog {
	return &replicaLog{handed: map[string][]time.Time{}, started: map[string]time.Time{}, reports: map[string]map[string]int{},
		stored: map[string]int{}, starts: map[string]int{}, held: map[string]int{}, movedAt: map[string]time.Time{},
		polled: map[string]int{}, sessions: make([]int, fronts), killed: -1, startCh: make(chan struct{}, 1)}
}

// welcomed records a session of uid welcomed at front idx.
func (l *replicaLog) welcomed(idx int, uid string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions[idx]++
	if l.killed >= 0 && l.held[uid] == l.killed && idx != l.killed {
		if _, ok := l.movedAt[uid]; !ok {
			l.movedAt[uid] = now
		}
	}
	if l.killed < 0 || idx != l.killed {
		l.held[uid] = idx
	}
}

func (l *replicaLog) offered(tasks []api.AgentTask, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range tasks {
		l.handed[t.TaskID] = append(l.handed[t.TaskID], now)
	}
}

func (l *replicaLog) startSeen(task string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.started[task]; !ok {
		l.started[task] = now
		select {
		case l.startCh <- struct{}{}:
		default:
		}
	}
}

func (l *replicaLog) startAnswered(task string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts[task]++
}

func (l *replicaLog) reportAnswered(task, reportID string, duplicate bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reports[task] == nil {
		l.reports[task] = map[string]int{}
	}
	l.reports[task][reportID]++
	if !duplicate {
		l.stored[task]++
	}
}

// front is a reverse proxy in front of one replica that records what
// passes (replicaLog): REST calls through httputil.ReverseProxy, agent
// sessions through sessionProxy, frame by frame. An agent reaching a
// killed replica through it gets 502 (or its session ends), as from a
// load balancer without a live backend.
type front struct {
	idx      int
	upstream string // the replica's base URL
	proxy    *httputil.ReverseProxy
	log      *replicaLog
}

// sessionTransport carries the fronts' sessions to the replicas: no
// timeouts (a session is long-lived; the replica's keep-alive deadline
// bounds it), no connection reuse.
var sessionTransport = &http.Transport{DisableKeepAlives: true, DisableCompression: true}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == api.SessionPath {
		f.session(w, r)
		return
	}
	var hbUID string
	if r.Method == http.MethodPost && r.URL.Path == "/api/v2/agent/heartbeat" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var hb api.Heartbeat
		_ = json.Unmarshal(body, &hb)
		hbUID = hb.PodUID
	}
	var rep api.Report
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/report") {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		_ = json.Unmarshal(body, &rep)
	}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/start") {
		f.log.startSeen(filepath.Base(filepath.Dir(r.URL.Path)), time.Now())
	}
	rec := &recorder{ResponseWriter: w}
	f.proxy.ServeHTTP(rec, r)
	if rec.code/100 != 2 {
		return
	}
	now := time.Now()
	switch {
	case hbUID != "":
		l := f.log
		l.mu.Lock()
		if l.killed >= 0 {
			l.polled[hbUID]++
		}
		l.mu.Unlock()
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/agent/tasks":
		var fr api.FetchReply
		if json.Unmarshal(rec.body.Bytes(), &fr) == nil {
			f.log.offered(fr.Tasks, now)
		}
	case strings.HasSuffix(r.URL.Path, "/start"):
		f.log.startAnswered(filepath.Base(filepath.Dir(r.URL.Path)))
	case strings.HasSuffix(r.URL.Path, "/report"):
		var rr api.ReportReply
		dup := json.Unmarshal(rec.body.Bytes(), &rr) != nil || rr.Duplicate
		f.log.reportAnswered(filepath.Base(filepath.Dir(r.URL.Path)), rep.ReportID, dup)
	}
}

// session relays one agent session to the replica, line by line in both
// directions, recording welcomes, offers, starts and the replies to
// starts and reports. It ends when either side ends (the replica's death
// ends the agent's session, as a load balancer's would).
func (f *front) session(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		http.Error(w, err.Error(), http.StatusNotImplemented)
		return
	}
	uid := r.URL.Query().Get("pod_uid")
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, f.upstream+r.URL.RequestURI(), pr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	req.ContentLength = -1

	type call struct{ kind, task, reportID string }
	var mu sync.Mutex // guards calls
	calls := map[uint64]call{}
	go func() { // agent → replica
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 0, 4096), api.MaxReportBody+64<<10)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Equal(line, []byte(api.KeepaliveLine)) {
				var fr api.SessionFrame
				if json.Unmarshal(line, &fr) == nil {
					switch {
					case fr.Type == api.FrameStart:
						f.log.startSeen(fr.TaskID, time.Now())
						mu.Lock()
						calls[fr.Seq] = call{kind: fr.Type, task: fr.TaskID}
						mu.Unlock()
					case fr.Type == api.FrameReport && fr.Report != nil:
						mu.Lock()
						calls[fr.Seq] = call{kind: fr.Type, task: fr.Report.TaskID, reportID: fr.Report.ReportID}
						mu.Unlock()
					}
				}
			}
			if _, err := pw.Write(append(line, '\n')); err != nil {
				return
			}
		}
		pw.CloseWithError(sc.Err())
	}()

	resp, err := sessionTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, "front: replica unreachable: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_ = rc.Flush()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	sc := bufio.NewScanner(resp.Body) // replica → agent
	sc.Buffer(make([]byte, 0, 4096), api.MaxReportBody+64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Equal(line, []byte(api.KeepaliveLine)) {
			var fr api.SessionFrame
			if json.Unmarshal(line, &fr) == nil {
				now := time.Now()
				switch fr.Type {
				case api.FrameWelcome:
					f.log.welcomed(f.idx, uid, now)
				case api.FrameOffer:
					if fr.Offer != nil {
						f.log.offered(fr.Offer.Tasks, now)
					}
				case api.FrameReply:
					mu.Lock()
					c, ok := calls[fr.Seq]
					delete(calls, fr.Seq)
					mu.Unlock()
					if ok && fr.Error == nil {
						if c.kind == api.FrameStart {
							f.log.startAnswered(c.task)
						} else {
							f.log.reportAnswered(c.task, c.reportID, fr.Reported == nil || fr.Reported.Duplicate)
						}
					}
				}
			}
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
