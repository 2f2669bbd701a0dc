package api

import (
	"encoding/json"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
)

// Run states.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// RunCreate is the body of POST /api/v2/runs: a list of tasks.
type RunCreate struct {
	// Suite names what produced the run; "tasks" (the default) for a plain
	// list.
	Suite string `json:"suite,omitempty"`
	// AllowConcurrency lets exclusive (throughput) tasks of this run share a
	// node.
	AllowConcurrency bool            `json:"allow_concurrency,omitempty"`
	Params           json.RawMessage `json:"params,omitempty"`
	Tasks            []RunTask       `json:"tasks"`
}

// RunTask is one task of a run. Src and Dst name agents by pod uid or pod
// name. Type is "probe" (the default) with Spec, or a v1 tool type with
// Param. The server fills Spec.Target from the destination agent.
type RunTask struct {
	Src     string         `json:"src"`
	Dst     string         `json:"dst"`
	Type    string         `json:"type,omitempty"`
	Spec    *probe.Spec    `json:"spec,omitempty"`
	Param   string         `json:"param,omitempty"`
	Timeout probe.Duration `json:"timeout,omitempty"`
	// Exclusive overrides the default (true for throughput kinds: tcp,
	// udp, iperf, iperf3).
	Exclusive *bool `json:"exclusive,omitempty"`
	// QoS, for a probe task, is a traffic-control set-up the source agent
	// applies on its own interface (the one holding its pod IP) while the
	// probe runs, and removes afterwards.
	QoS *qosspec.Spec `json:"qos,omitempty"`
	// Via, for a probe task to the destination's responder, is the
	// address (IP:PORT, the responder's port) of a Service in front of the
	// destination agent: the probe's target becomes it instead of the
	// responder's own address.
	Via string `json:"via,omitempty"`
}

// Run is a run as v2 answers it.
type Run struct {
	ID               string          `json:"id"`
	Suite            string          `json:"suite"`
	State            string          `json:"state"`
	AllowConcurrency bool            `json:"allow_concurrency"`
	Params           json.RawMessage `json:"params,omitempty"`
	CreatedAt        time.Time       `json:"created_at"`
	FinishedAt       *time.Time      `json:"finished_at,omitempty"`
	Counts           map[string]int  `json:"counts"`
	// Tasks is one page of the run's tasks (summaries: no raw output),
	// ordered by id: ?limit= (1-1000, default 1000) and ?after=.
	Tasks []TaskV2 `json:"tasks,omitempty"`
	// TasksNextAfter, when non-zero, is the after= value of the next page
	// of tasks.
	TasksNextAfter int64 `json:"tasks_next_after,omitempty"`
}

// TaskV2 is a task as v2 answers it.
type TaskV2 struct {
	ID        int64           `json:"id"`
	TaskID    string          `json:"task_id"`
	RunID     string          `json:"run_id,omitempty"`
	Type      string          `json:"type"`
	Param     string          `json:"param,omitempty"`
	Spec      json.RawMessage `json:"spec,omitempty"`
	QoS       *qosspec.Spec   `json:"qos,omitempty"`
	SrcPodUID string          `json:"src_pod_uid"`
	SrcPodIP  string          `json:"src_pod_ip"`
	DstPodUID string          `json:"dst_pod_uid"`
	DstPodIP  string          `json:"dst_pod_ip"`
	State     string          `json:"state"`
	Reason    string          `json:"reason,omitempty"`
	// LateReason: the result arrived after the server had ended the task
	// for its agent's absence with this reason ("agent went offline",
	// "deadline passed"); the state and result are the agent's.
	LateReason string  `json:"late_reason,omitempty"`
	Exclusive  bool    `json:"exclusive"`
	TimeoutS   float64 `json:"timeout_s"`
	// RawSize is the length in bytes of the raw tool output, which is not
	// part of a task's answer: GET /api/v2/tasks/{id}/raw reads it.
	RawSize      int64           `json:"raw_size,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	DispatchedAt *time.Time      `json:"dispatched_at,omitempty"`
	StartedAt    *time.Time      `json:"started_at,omitempty"`
	FinishedAt   *time.Time      `json:"finished_at,omitempty"`
	Deadline     *time.Time      `json:"deadline,omitempty"`
	UpdatedAt    time.Time       `json:"updated_at"`
	// StoppedAt: when the source agent acknowledged the end of a task it
	// was told to stop (its cancelled report, sent once it has stopped the
	// task and removed any QoS set-up); StopReason is that report's
	// reason. Absent until then.
	StoppedAt  *time.Time `json:"stopped_at,omitempty"`
	StopReason string     `json:"stop_reason,omitempty"`
}

// Agent is an agent as v2 answers it.
type Agent struct {
	ID            int64  `json:"id"`
	PodUID        string `json:"pod_uid"`
	PodName       string `json:"pod_name"`
	PodNamespace  string `json:"pod_namespace,omitempty"`
	PodIP         string `json:"pod_ip"`
	NodeName      string `json:"node_name"`
	NodeIP        string `json:"node_ip,omitempty"`
	HostNetwork   bool   `json:"host_network"`
	ResponderAddr string `json:"responder_addr,omitempty"`
	Version       string `json:"version,omitempty"`
	// NodeLabels are the labels of its node the agent reported (its
	// zone labels), for the pair plans by zone.
	NodeLabels    map[string]string `json:"node_labels,omitempty"`
	Status        string            `json:"status"` // free, busy, offline
	RegisterTime  time.Time         `json:"register_time"`
	LastHeartbeat time.Time         `json:"last_heartbeat"`
}

// TaskPage is one page of a task listing. NextAfter, when non-zero, is the
// after= value of the next page.
type TaskPage struct {
	Tasks     []TaskV2 `json:"tasks"`
	Total     int      `json:"total"`
	NextAfter int64    `json:"next_after,omitempty"`
}

// RunPage is one page of a run listing.
type RunPage struct {
	Runs      []Run  `json:"runs"`
	NextAfter string `json:"next_after,omitempty"`
}

// CancelRequest is the optional body of a cancel call.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// StartRequest is the body of an agent's start call.
type StartRequest struct {
	PodUID string `json:"pod_uid"`
}
