// Package client speaks cnperf's HTTP API (v1 and v2) for the CLI, the
// agent and tests. Every call takes a context and the underlying
// http.Client has a timeout, so no call waits forever. Errors from the
// server come back as *api.Error with the HTTP status and the server's
// message.
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/certs"
)

// Client calls a cnperf server: one, or one of several replicas of it
// (failover.go).
type Client struct {
	bases     []string      // server URLs, without a trailing slash
	cur       *atomic.Int32 // index of the one in use; shared by copies (WithToken)
	token     string
	tokenFile string // when set, the token is read from it for every request
	hc        *http.Client
	caFile    string
	caPEM     []byte
	// serverName is the name the server's certificate must carry when
	// it differs from the URL's host (an address, a port-forward).
	serverName string
	// requestTimeout bounds each request (a long poll: its wait more);
	// 0 leaves only the HTTP client's Timeout.
	requestTimeout time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (its Timeout must exceed the longest
// long-poll wait used).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithCAFile makes an https:// client trust the CA certificates in the
// PEM file path instead of the system pool ("" keeps the system pool).
// It applies to the client's own transport or one set by WithHTTPClient
// whose Transport is nil or an *http.Transport.
func WithCAFile(path string) Option { return func(c *Client) { c.caFile = path } }

// WithCAPEM makes an https:// client trust the CA certificates in caPEM
// (read from a cluster, say) instead of the system pool.
func WithCAPEM(caPEM []byte) Option { return func(c *Client) { c.caPEM = caPEM } }

// WithServerName makes an https:// client verify that the server's
// certificate names name instead of the URL's host: an agent that reaches
// the server at its Service's address, or a CLI through a port-forward on
// 127.0.0.1, verifies the Service's DNS name ("" keeps the URL's host).
func WithServerName(name string) Option { return func(c *Client) { c.serverName = name } }

// WithRequestTimeout bounds every request to d (kubectl's
// --request-timeout); a long poll gets its wait on top. A request past it
// fails with an error naming the bound. 0 keeps DefaultTimeout alone.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithTokenFile makes the client read its bearer token from path before
// every request instead of using a fixed one: a Kubernetes projected
// ServiceAccount token, which the kubelet rotates in place.
func WithTokenFile(path string) Option { return func(c *Client) { c.tokenFile = path } }

// WithToken returns a copy of the client that sends token instead (an
// agent switching from the join token to its own credential).
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token, cp.tokenFile = token, ""
	return &cp
}

// DefaultTimeout bounds every request, long polls included.
const DefaultTimeout = 70 * time.Second

// New returns a client of the server at base (http://HOST:PORT) sending
// token as its bearer token.
//
// base may list several URLs separated by commas: replicas of one server
// sharing a database. The client uses the first and moves to the next
// (wrapping) when the one in use cannot be reached or answers 502, 503 or
// 504; a request that could not even connect is sent to the next at once.
func New(base, token string, opts ...Option) (*Client, error) {
	var bases []string
	for _, b := range strings.Split(base, ",") {
		b = strings.TrimSpace(b)
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("server URL %q: %w", b, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("server URL %q: want http:// or https://", b)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("server URL %q: missing host", b)
		}
		bases = append(bases, strings.TrimRight(b, "/"))
	}
	c := &Client{bases: bases, cur: new(atomic.Int32), token: token, hc: &http.Client{Timeout: DefaultTimeout}}
	for _, o := range opts {
		o(c)
	}
	if c.caFile != "" || c.caPEM != nil || c.serverName != "" {
		if err := c.trustCA(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// trustCA gives the client's transport a TLS configuration trusting the
// CA file or PEM, verifying the server name when one is set.
func (c *Client) trustCA() error {
	var cfg *tls.Config
	var err error
	if c.caPEM != nil {
		cfg, err = certs.ClientConfigPEM(c.caPEM)
		if err != nil {
			err = fmt.Errorf("CA: %w", err)
		}
	} else {
		cfg, err = certs.ClientConfig(c.caFile)
	}
	if err != nil {
		return err
	}
	cfg.ServerName = c.serverName
	var tr *http.Transport
	switch t := c.hc.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return fmt.Errorf("TLS settings (CA %q, server name %q): the client's transport %T takes no TLS configuration", c.caFile, c.serverName, t)
	}
	tr.TLSClientConfig = cfg
	hc := *c.hc // a copy: the caller's client is left alone
	hc.Transport = tr
	c.hc = &hc
	return nil
}

// Base returns the server URL in use.
func (c *Client) Base() string { return c.bases[c.cur.Load()] }

// do sends a request and returns the response body of a 2xx answer, or an
// *api.Error built from the error body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in any) ([]byte, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = b
	}
	tok := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s %s: read token: %w", method, path, err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if c.requestTimeout > 0 {
		bound := c.requestTimeout
		if w, err := time.ParseDuration(q.Get("wait")); err == nil && w > 0 {
			bound += w // a long poll may rightly wait that long
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, bound, fmt.Errorf("%w: no answer from %s within %v (--request-timeout)", ErrRequestTimeout, c.Base(), bound))
		defer cancel()
	}
	resp, err := c.send(ctx, method, path, q, body, tok)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrRequestTimeout) {
			return nil, fmt.Errorf("%s %s: %w", method, path, cause)
		}
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrRequestTimeout) {
			return nil, fmt.Errorf("%s %s: read answer: %w", method, path, cause)
		}
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		if unavailable(resp.StatusCode) {
			c.moveOn(c.indexOf(resp.Request))
		}
		if mediaType(resp) == "text/html" {
			return nil, c.notCnperf(resp, data)
		}
		return nil, errorFrom(resp.StatusCode, data)
	}
	if mediaType(resp) == "text/html" || len(data) > 0 && !json.Valid(data) {
		return nil, c.notCnperf(resp, data)
	}
	return data, nil
}

// ErrRequestTimeout is the cause of a request that ran past the client's
// request timeout (WithRequestTimeout).
var ErrRequestTimeout = errors.New("request timeout")

// ErrNotCnperf marks an answer that no cnperf server gives: every API
// answer of a cnperf server, errors included, is JSON.
var ErrNotCnperf = errors.New("not a cnperf server")

// mediaType is an answer's media type ("" when it names none). A cnperf
// server answers every API call with JSON; an HTML page (a web server, a
// login proxy) is never one of its answers, not even an error (its
// unknown routes answer text/plain), and a 2xx answer that is not JSON
// is not one either.
func mediaType(resp *http.Response) string {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// notCnperf is the one-line error for an answer that is not a cnperf
// server's: the URL, the status and content type, and the page's title
// when it has one, never the page itself.
func (c *Client) notCnperf(resp *http.Response, data []byte) error {
	what := resp.Header.Get("Content-Type")
	if m := titleRE.FindSubmatch(data); m != nil {
		what += fmt.Sprintf(", title %q", strings.TrimSpace(string(m[1])))
	}
	return fmt.Errorf("%s %s: %w: it answered HTTP %d (%s); check --server", resp.Request.Method, c.Base(), ErrNotCnperf, resp.StatusCode, what)
}

var titleRE = regexp.MustCompile(`(?is)<title[^>]*>(.{0,120}?)</title>`)

func errorFrom(status int, data []byte) error {
	var eb struct {
		Error  string `json:"error"`
		Field  string `json:"field"`
		Msg    string `json:"msg"`
		Status *int   `json:"status"`
	}
	if json.Unmarshal(data, &eb) == nil {
		msg := eb.Error
		if msg == "" {
			msg = eb.Msg
		}
		if msg != "" {
			// The server's message already names the field.
			msg = strings.TrimPrefix(msg, eb.Field+": ")
			return &api.Error{Status: status, Field: eb.Field, Message: msg}
		}
	}
	text := strings.TrimSpace(string(data))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return &api.Error{Status: status, Message: fmt.Sprintf("HTTP %d: %s", status, text)}
}

// v1 calls the seed's API and unwraps the envelope into out.
func (c *Client) v1(ctx context.Context, method, path string, q url.Values, in, out any) error {
	data, err := c.do(ctx, method, path, q, in)
	if err != nil {
		return err
	}
	var env api.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("%s %s: decode envelope: %w", method, path, err)
	}
	if env.Status != 0 {
		return &api.Error{Status: env.Status, Message: env.Msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("%s %s: decode data: %w", method, path, err)
	}
	return nil
}

// v2 calls the structured API and decodes the JSON answer into out.
func (c *Client) v2(ctx context.Context, method, path string, q url.Values, in, out any) error {
	data, err := c.do(ctx, method, path, q, in)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Clients lists agents (v1); all includes offline ones.
func (c *Client) Clients(ctx context.Context, all bool) ([]api.Client, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	var out []api.Client
	return out, c.v1(ctx, http.MethodGet, "/api/v1/external/clients", q, nil, &out)
}

// CreateTasks creates v1 tasks and returns their ids.
func (c *Client) CreateTasks(ctx context.Context, tcs []api.TaskCreate) ([]string, error) {
	var ids []string
	return ids, c.v1(ctx, http.MethodPost, "/api/v1/external/task/create", nil, tcs, &ids)
}

// Task returns one task in the v1 shape.
func (c *Client) Task(ctx context.Context, id string) (api.Task, error) {
	var t api.Task
	return t, c.v1(ctx, http.MethodGet, "/api/v1/external/task", url.Values{"task_id": {id}}, nil, &t)
}

// Heartbeat sends one agent heartbeat.
func (c *Client) Heartbeat(ctx context.Context, hb api.Heartbeat) (api.HeartbeatReply, error) {
	var r api.HeartbeatReply
	return r, c.v2(ctx, http.MethodPost, "/api/v2/agent/heartbeat", nil, hb, &r)
}

// Fetch long-polls for the agent's tasks, waiting up to wait on the server.
func (c *Client) Fetch(ctx context.Context, podUID string, wait time.Duration) (api.FetchReply, error) {
	q := url.Values{"pod_uid": {podUID}, "wait": {wait.String()}}
	var r api.FetchReply
	return r, c.v2(ctx, http.MethodGet, "/api/v2/agent/tasks", q, nil, &r)
}

// Start tells the server the agent started the task.
func (c *Client) Start(ctx context.Context, taskID, podUID string) error {
	return c.v2(ctx, http.MethodPost, "/api/v2/agent/tasks/"+url.PathEscape(taskID)+"/start", nil, api.StartRequest{PodUID: podUID}, nil)
}

// Serving tells the server the destination side of a task is ready (or not).
func (c *Client) Serving(ctx context.Context, taskID string, s api.Serving) error {
	return c.v2(ctx, http.MethodPost, "/api/v2/agent/tasks/"+url.PathEscape(taskID)+"/serving", nil, s, nil)
}

// Report delivers a task's result.
func (c *Client) Report(ctx context.Context, r api.Report) (api.ReportReply, error) {
	var out api.ReportReply
	return out, c.v2(ctx, http.MethodPost, "/api/v2/agent/tasks/"+url.PathEscape(r.TaskID)+"/report", nil, r, &out)
}

// Join asks for the agent's own credential with the join token; the
// answer's Token is shown this once.
func (c *Client) Join(ctx context.Context, podUID string) (api.JoinReply, error) {
	var out api.JoinReply
	return out, c.v2(ctx, http.MethodPost, "/api/v2/agent/join", nil, api.JoinRequest{PodUID: podUID}, &out)
}

// ForgetAgent deletes an agent's credential, revoked or not, so that its
// uid may join again (user token).
func (c *Client) ForgetAgent(ctx context.Context, podUID string) error {
	return c.v2(ctx, http.MethodPost, "/api/v2/agents/"+url.PathEscape(podUID)+"/forget", nil, nil, nil)
}

// RevokeAgent ends an agent's credential (user token).
func (c *Client) RevokeAgent(ctx context.Context, podUID string) (api.Revoked, error) {
	var out api.Revoked
	return out, c.v2(ctx, http.MethodPost, "/api/v2/agents/"+url.PathEscape(podUID)+"/revoke", nil, nil, &out)
}

// CreateRun creates a v2 run.
func (c *Client) CreateRun(ctx context.Context, rc api.RunCreate) (api.Run, error) {
	var r api.Run
	return r, c.v2(ctx, http.MethodPost, "/api/v2/runs", nil, rc, &r)
}

// GetRun returns a run with all its tasks (summaries, no raw output),
// reading the server's pages of tasks one after another.
func (c *Client) GetRun(ctx context.Context, id string) (api.Run, error) {
	var all api.Run
	var after int64
	for page := 0; ; page++ {
		r, err := c.GetRunPage(ctx, id, 0, after)
		if err != nil {
			return api.Run{}, err
		}
		if page == 0 {
			all = r
		} else {
			all.Tasks = append(all.Tasks, r.Tasks...)
		}
		if r.TasksNextAfter == 0 || r.TasksNextAfter <= after {
			all.TasksNextAfter = 0
			return all, nil
		}
		after = r.TasksNextAfter
	}
}

// GetRunPage returns a run with one page of its tasks: at most limit (0:
// the server's default) after the task id after.
func (c *Client) GetRunPage(ctx context.Context, id string, limit int, after int64) (api.Run, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var r api.Run
	return r, c.v2(ctx, http.MethodGet, "/api/v2/runs/"+url.PathEscape(id), q, nil, &r)
}

// TaskRaw copies a task's raw tool output to w, as the server streams it
// (no size limit: outputs are stored whole), and returns its length.
func (c *Client) TaskRaw(ctx context.Context, id string, w io.Writer) (int64, error) {
	path := "/api/v2/tasks/" + url.PathEscape(id) + "/raw"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base()+path, nil)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, errorFrom(resp.StatusCode, data)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: read output: %w", path, err)
	}
	return n, nil
}

// ListRuns returns one page of runs.
func (c *Client) ListRuns(ctx context.Context, limit int, after string) (api.RunPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	var p api.RunPage
	return p, c.v2(ctx, http.MethodGet, "/api/v2/runs", q, nil, &p)
}

// RunQuery selects runs for ListRunsWhere; zero fields match everything.
type RunQuery struct {
	Suite string
	// Since keeps runs created at or after it.
	Since time.Time
	Limit int
	After string // next_after of the previous page
}

// ListRunsWhere returns one page of the runs q selects.
func (c *Client) ListRunsWhere(ctx context.Context, q RunQuery) (api.RunPage, error) {
	v := url.Values{}
	if q.Suite != "" {
		v.Set("suite", q.Suite)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	var p api.RunPage
	return p, c.v2(ctx, http.MethodGet, "/api/v2/runs", v, nil, &p)
}

// CancelRun cancels a run's unfinished tasks.
func (c *Client) CancelRun(ctx context.Context, id, reason string) (api.Run, error) {
	var r api.Run
	return r, c.v2(ctx, http.MethodPost, "/api/v2/runs/"+url.PathEscape(id)+"/cancel", nil, api.CancelRequest{Reason: reason}, &r)
}

// TaskQuery filters a task listing.
type TaskQuery struct {
	Run, State, Agent, Type string
	Limit                   int
	After                   int64
}

// ListTasks returns one page of tasks (v2).
func (c *Client) ListTasks(ctx context.Context, tq TaskQuery) (api.TaskPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"run": tq.Run, "state": tq.State, "agent": tq.Agent, "type": tq.Type} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if tq.Limit > 0 {
		q.Set("limit", strconv.Itoa(tq.Limit))
	}
	if tq.After > 0 {
		q.Set("after", strconv.FormatInt(tq.After, 10))
	}
	var p api.TaskPage
	return p, c.v2(ctx, http.MethodGet, "/api/v2/tasks", q, nil, &p)
}

// GetTask returns one task (v2).
func (c *Client) GetTask(ctx context.Context, id string) (api.TaskV2, error) {
	var t api.TaskV2
	return t, c.v2(ctx, http.MethodGet, "/api/v2/tasks/"+url.PathEscape(id), nil, nil, &t)
}

// CancelTask cancels one task.
func (c *Client) CancelTask(ctx context.Context, id, reason string) (api.TaskV2, error) {
	var t api.TaskV2
	return t, c.v2(ctx, http.MethodPost, "/api/v2/tasks/"+url.PathEscape(id)+"/cancel", nil, api.CancelRequest{Reason: reason}, &t)
}

// Agents lists agents (v2); all includes offline ones.
func (c *Client) Agents(ctx context.Context, all bool) ([]api.Agent, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	var out []api.Agent
	return out, c.v2(ctx, http.MethodGet, "/api/v2/agents", q, nil, &out)
}

// WaitTask polls a task until it is final or ctx ends.
func (c *Client) WaitTask(ctx context.Context, id string, every time.Duration) (api.TaskV2, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		task, err := c.GetTask(ctx, id)
		if err != nil {
			return task, err
		}
		if api.TerminalState(task.State) {
			return task, nil
		}
		select {
		case <-ctx.Done():
			return task, fmt.Errorf("wait for task %s (state %s): %w", id, task.State, ctx.Err())
		case <-t.C:
		}
	}
}

// CreateSchedule creates a schedule: the server runs the suite by itself.
func (c *Client) CreateSchedule(ctx context.Context, sc api.ScheduleCreate) (api.Schedule, error) {
	var out api.Schedule
	return out, c.v2(ctx, http.MethodPost, "/api/v2/schedules", nil, sc, &out)
}

// ListSchedules returns every schedule with its latest runs.
func (c *Client) ListSchedules(ctx context.Context) ([]api.Schedule, error) {
	var out []api.Schedule
	return out, c.v2(ctx, http.MethodGet, "/api/v2/schedules", nil, nil, &out)
}

// GetSchedule returns a schedule with its latest runs.
func (c *Client) GetSchedule(ctx context.Context, id string) (api.Schedule, error) {
	var out api.Schedule
	return out, c.v2(ctx, http.MethodGet, "/api/v2/schedules/"+url.PathEscape(id), nil, nil, &out)
}

// ScheduleRuns returns a schedule's history, newest first, with the
// summaries' rows (limit 0: the server's default).
func (c *Client) ScheduleRuns(ctx context.Context, id string, limit int) ([]api.ScheduleRun, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []api.ScheduleRun
	return out, c.v2(ctx, http.MethodGet, "/api/v2/schedules/"+url.PathEscape(id)+"/runs", q, nil, &out)
}

// DeleteSchedule deletes a schedule and its history (not its runs); a
// run of it still going is cancelled.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (api.Schedule, error) {
	var out api.Schedule
	return out, c.v2(ctx, http.MethodDelete, "/api/v2/schedules/"+url.PathEscape(id), nil, nil, &out)
}

// MatrixCoverage answers a page of the matrix's coverage: whole
// senders' rows after q.After; follow Next for the rest.
func (c *Client) MatrixCoverage(ctx context.Context, q api.CoverageQuery) (api.MatrixCoverage, error) {
	v := url.Values{}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Overdue > 0 {
		v.Set("overdue", q.Overdue.String())
	}
	if q.OnlyOverdue {
		v.Set("only_overdue", "1")
	}
	var out api.MatrixCoverage
	return out, c.v2(ctx, http.MethodGet, "/api/v2/matrix/coverage", v, nil, &out)
}
