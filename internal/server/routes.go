package server

import (
	"net/http"

	"github.com/cnperf/cnperf/internal/api"
)

// route is one endpoint: the mux pattern, who may call it, and what the
// OpenAPI document says about it.
type route struct {
	method, path string
	auth         *role // nil: no token needed
	v1           bool  // answers in the seed's envelope
	handler      http.HandlerFunc
	summary      string
	query        []param
	body         any // example value of the request body type, or nil
	answer       any // example value of the answer's data type, or nil
	status       int // success status (200 when 0)
	fullDuplex   bool
}

type param struct {
	name, desc string
	required   bool
}

func ptr(r role) *role { return &r }

func (s *Server) table() []route {
	user, agent := ptr(roleUser), ptr(roleAgent)
	uid := param{"pod_uid", "the calling agent's pod uid", true}
	return []route{
		{method: "POST", path: "/api/v1/internal/heartbeat", auth: agent, v1: true, handler: s.handleHeartbeatV1,
			summary: "Agent heartbeat (seed API)", body: api.Heartbeat{}, answer: api.HeartbeatReply{}},
		{method: "GET", path: "/api/v1/internal/get_tasks", auth: agent, v1: true, handler: s.handleGetTasksV1,
			summary: "Claim the agent's ready tasks (seed API)", query: []param{uid}, answer: []api.Task{}},
		{method: "POST", path: "/api/v1/internal/report_task", auth: agent, v1: true, handler: s.handleReportV1,
			summary: "Report a task's result (seed API)", body: api.Report{}, answer: api.ReportReply{}},
		{method: "GET", path: "/api/v1/external/clients", auth: user, v1: true, handler: s.handleClientsV1,
			summary: "List online agents (all=1: offline too)", query: []param{{"all", "1 to include offline agents", false}}, answer: []api.Client{}},
		{method: "POST", path: "/api/v1/external/task/create", auth: user, v1: true, handler: s.handleTaskCreateV1,
			summary: "Create tool tasks (ping, iperf, iperf3, traceroute); answers their ids", body: []api.TaskCreate{}, answer: []string{}},
		{method: "GET", path: "/api/v1/external/task", auth: user, v1: true, handler: s.handleTaskV1,
			summary: "Get a task and its raw result", query: []param{{"task_id", "the task id", true}}, answer: api.Task{}},

		{method: "POST", path: "/api/v2/runs", auth: user, handler: s.handleRunCreate, status: http.StatusCreated,
			summary: "Create a run of tasks (probe specs or tool tasks)", body: api.RunCreate{}, answer: api.Run{}},
		{method: "GET", path: "/api/v2/runs", auth: user, handler: s.handleRunList,
			summary: "List runs", query: []param{{"state", "run state", false}, {"suite", "suite name", false}, {"since", "only runs created at or after this RFC 3339 time", false}, {"limit", "page size (1-1000)", false}, {"after", "next_after of the previous page", false}}, answer: api.RunPage{}},
		{method: "GET", path: "/api/v2/runs/{id}", auth: user, handler: s.handleRunGet,
			summary: "Get a run with its counts and a page of its tasks (summaries, no raw output)", query: []param{{"limit", "tasks per page (1-1000, default 1000)", false}, {"after", "tasks_next_after of the previous page", false}}, answer: api.Run{}},
		{method: "POST", path: "/api/v2/runs/{id}/cancel", auth: user, handler: s.handleRunCancel,
			summary: "Cancel a run's unfinished tasks", body: api.CancelRequest{}, answer: api.Run{}},
		{method: "GET", path: "/api/v2/tasks", auth: user, handler: s.handleTaskList,
			summary: "List tasks", query: []param{{"run", "run id", false}, {"state", "task state", false}, {"agent", "pod uid of the source or destination", false}, {"type", "task type", false}, {"limit", "page size (1-1000)", false}, {"after", "next_after of the previous page", false}}, answer: api.TaskPage{}},
		{method: "GET", path: "/api/v2/tasks/{id}", auth: user, handler: s.handleTaskGet,
			summary: "Get a task", answer: api.TaskV2{}},
		{method: "GET", path: "/api/v2/tasks/{id}/raw", auth: user, handler: s.handleTaskRaw,
			summary: "A task's raw tool output, as text/plain (empty when it has none)"},
		{method: "POST", path: "/api/v2/tasks/{id}/cancel", auth: user, handler: s.handleTaskCancel,
			summary: "Cancel a task", body: api.CancelRequest{}, answer: api.TaskV2{}},
		{method: "GET", path: "/api/v2/agents", auth: user, handler: s.handleAgentsV2,
			summary: "List agents", query: []param{{"all", "1 to include offline agents", false}, {"node", "node name", false}}, answer: []api.Agent{}},
		{method: "GET", path: "/api/v2/matrix/coverage", auth: user, handler: s.handleMatrixCoverage,
			summary: "A page of the ordered node pairs' latest matrix measurements (time, kinds, figures), whichever run and plan made them, whole senders' rows; pairs never measured without a time; the first page tallies the whole matrix",
			query: []param{{"limit", "pairs a page (1-50000, default 5000; at least one sender's row)", false}, {"after", "next of the previous page", false},
				{"overdue", "a pair not measured within this duration is overdue (default 24h)", false}, {"only_overdue", "1: only the overdue pairs", false}}, answer: api.MatrixCoverage{}},

		{method: "POST", path: "/api/v2/schedules", auth: user, handler: s.handleScheduleCreate, status: http.StatusCreated,
			summary: "Create a schedule: the server runs the suite every `every`, first at once, never two at once", body: api.ScheduleCreate{}, answer: api.Schedule{}},
		{method: "GET", path: "/api/v2/schedules", auth: user, handler: s.handleScheduleList,
			summary: "List schedules with their latest runs (summaries without rows)", answer: []api.Schedule{}},
		{method: "GET", path: "/api/v2/schedules/{id}", auth: user, handler: s.handleScheduleGet,
			summary: "Get a schedule with its latest runs", answer: api.Schedule{}},
		{method: "GET", path: "/api/v2/schedules/{id}/runs", auth: user, handler: s.handleScheduleRuns,
			summary: "A schedule's history, newest first: each due time's runs, state, reason, rows, outliers and SLO verdict", query: []param{{"limit", "how many (1-1000, default 100)", false}}, answer: []api.ScheduleRun{}},
		{method: "DELETE", path: "/api/v2/schedules/{id}", auth: user, handler: s.handleScheduleDelete,
			summary: "Delete a schedule and its history (its runs stay; one going is cancelled)", answer: api.Schedule{}},

		{method: "POST", path: "/api/v2/agents/{uid}/revoke", auth: user, handler: s.handleRevoke,
			summary: "End an agent's credential; its uid stays taken (the join token cannot join it again until forgotten)", answer: api.Revoked{}},
		{method: "POST", path: "/api/v2/agents/{uid}/forget", auth: user, handler: s.handleForget,
			summary: "Delete an agent's credential, revoked or not: the uid may join again with the join token", answer: api.Revoked{}},

		{method: "POST", path: "/api/v2/agent/join", auth: agent, handler: s.handleJoin,
			summary: "Join with the join token: answers the agent's own credential, once per pod uid", body: api.JoinRequest{}, answer: api.JoinReply{}},
		{method: "POST", path: api.SessionPath, auth: agent, handler: s.handleSession,
			fullDuplex: true,
			summary:    "Agent session: one full-duplex request whose bodies are NDJSON streams of session frames (hello first; presence, offers, acks, start, serving, reports)", query: []param{uid}, body: api.SessionFrame{}, answer: api.SessionFrame{}},
		{method: "POST", path: "/api/v2/agent/heartbeat", auth: agent, handler: s.handleHeartbeatV2,
			summary: "Agent heartbeat", body: api.Heartbeat{}, answer: api.HeartbeatReply{}},
		{method: "GET", path: "/api/v2/agent/tasks", auth: agent, handler: s.handleFetch,
			summary: "Long-poll the agent's tasks, server requests and cancellations", query: []param{uid, {"wait", "longest wait, e.g. 30s (capped at 30s)", false}}, answer: api.FetchReply{}},
		{method: "POST", path: "/api/v2/agent/tasks/{id}/start", auth: agent, handler: s.handleStart,
			summary: "The agent started the task", body: api.StartRequest{}, answer: api.TaskV2{}},
		{method: "POST", path: "/api/v2/agent/tasks/{id}/serving", auth: agent, handler: s.handleServing, status: http.StatusNoContent,
			summary: "The destination started (or failed to start) the task's iperf server", body: api.Serving{}},
		{method: "POST", path: "/api/v2/agent/tasks/{id}/report", auth: agent, handler: s.handleReportV2,
			summary: "Report a task's result (idempotent by report_id)", body: api.Report{}, answer: api.ReportReply{}},

		{method: "GET", path: "/api/v2/openapi.json", handler: s.handleOpenAPI, summary: "This document"},
		{method: "GET", path: "/healthz", handler: s.handleHealthz, summary: "Liveness"},
		{method: "GET", path: "/readyz", handler: s.handleReadyz, summary: "Readiness: the store answers and can write"},
	}
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	for _, rt := range s.table() {
		h := rt.handler
		if rt.auth != nil {
			h = s.auth(*rt.auth, rt.v1, h)
		}
		if rt.fullDuplex {
			h = fullDuplex(h)
		}
		s.mux.HandleFunc(rt.method+" "+rt.path, h)
	}
	// Anything else: a JSON 404 (auth first, so unknown paths leak nothing).
	s.mux.HandleFunc("/", s.auth(roleUser, false, func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, false, &api.Error{Status: http.StatusNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path + " (see /api/v2/openapi.json)"})
	}))
}

// fullDuplex lets a streaming request's handler, and the checks before it,
// answer while the body is still arriving: without it net/http would read
// a refused session's endless body before answering. The connection closes
// after the answer.
func fullDuplex(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Connection", "close")
		h(w, r)
	}
}
