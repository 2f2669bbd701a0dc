package api

import (
	"encoding/json"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
)

// Task states (the life cycle: pending → dispatched → running → succeeded |
// failed | timed_out | cancelled).
const (
	StatePending    = "pending"
	StateDispatched = "dispatched"
	StateRunning    = "running"
	StateSucceeded  = "succeeded"
	StateFailed     = "failed"
	StateTimedOut   = "timed_out"
	StateCancelled  = "cancelled"
)

// TerminalState reports whether s is a final state.
func TerminalState(s string) bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimedOut, StateCancelled:
		return true
	}
	return false
}

// v1 TaskStatus codes.
const (
	TaskStatusCreated   = 1
	TaskStatusRunning   = 2
	TaskStatusFinished  = 3
	TaskStatusFailed    = 4
	TaskStatusTimedOut  = 5
	TaskStatusCancelled = 6
)

// TaskStatusCode maps a task state to its v1 TaskStatus code (0 for an
// unknown state).
func TaskStatusCode(state string) int {
	switch state {
	case StatePending, StateDispatched:
		return TaskStatusCreated
	case StateRunning:
		return TaskStatusRunning
	case StateSucceeded:
		return TaskStatusFinished
	case StateFailed:
		return TaskStatusFailed
	case StateTimedOut:
		return TaskStatusTimedOut
	case StateCancelled:
		return TaskStatusCancelled
	}
	return 0
}

// StateOfTaskStatus maps a reported v1 TaskStatus code to a final state; ok
// is false for codes that are not final.
func StateOfTaskStatus(code int) (state string, ok bool) {
	switch code {
	case TaskStatusFinished:
		return StateSucceeded, true
	case TaskStatusFailed:
		return StateFailed, true
	case TaskStatusTimedOut:
		return StateTimedOut, true
	case TaskStatusCancelled:
		return StateCancelled, true
	}
	return "", false
}

// v1 ClientStatus codes.
const (
	ClientStatusFree    = 1
	ClientStatusBusy    = 2
	ClientStatusOffline = 3
)

// v1 task types: the external tools.
const (
	TypePing       = "ping"
	TypeIperf      = "iperf"
	TypeIperf3     = "iperf3"
	TypeTraceroute = "traceroute"
	// TypeProbe is a v2 task running one of cnperf's own probes.
	TypeProbe = "probe"
	// TypeQoSHold is a v2 task that only holds its QoS set-up: the source
	// agent applies it before it reports the task started, keeps it for
	// the spec's duration or until the task is cancelled, and removes it
	// (on a pod agent: its own interface; on a host-network agent: the
	// node's interface of its route to the destination agent). An
	// environment uses it to keep a qdisc in place for a whole phase.
	TypeQoSHold = "qos-hold"
)

// ReasonRemoveFailed is in the reason of an agent's report when removing
// a task's QoS set-up failed, so a stopped task's StopReason tells a
// set-up left in place from one removed.
const ReasonRemoveFailed = "qos: removing the set-up failed"

// V1Types lists the task types of the v1 API.
var V1Types = []string{TypePing, TypeIperf, TypeIperf3, TypeTraceroute}

// IsV1Type reports whether t is a v1 (external tool) task type.
func IsV1Type(t string) bool {
	switch t {
	case TypePing, TypeIperf, TypeIperf3, TypeTraceroute:
		return true
	}
	return false
}

// Client is one agent as the v1 clients list shows it.
type Client struct {
	ID           int64     `json:"ID"`
	PodName      string    `json:"PodName"`
	PodUID       string    `json:"PodUID"`
	PodIP        string    `json:"PodIP"`
	NodeName     string    `json:"NodeName"`
	NodeIP       string    `json:"NodeIP"`
	ClientStatus int       `json:"ClientStatus"`
	RegisterTime time.Time `json:"RegisterTime"`
	UpdateTime   time.Time `json:"UpdateTime"`
}

// TaskCreate is one element of the v1 task/create body.
type TaskCreate struct {
	SrcPodUID string `json:"src_pod_uid"`
	SrcPodIP  string `json:"src_pod_ip"`
	DstPodUID string `json:"dst_pod_uid"`
	DstPodIP  string `json:"dst_pod_ip"`
	TaskParam string `json:"task_param"`
	TaskType  string `json:"task_type"`
}

// Task is a task as the v1 task query answers it. SrcPodID and DstPodID
// repeat the UIDs under the names the seed's screenshots also showed.
type Task struct {
	ID         int64  `json:"ID"`
	TaskID     string `json:"TaskID"`
	SrcPodUID  string `json:"SrcPodUID"`
	SrcPodID   string `json:"SrcPodID"`
	SrcPodIP   string `json:"SrcPodIP"`
	DstPodUID  string `json:"DstPodUID"`
	DstPodID   string `json:"DstPodID"`
	DstPodIP   string `json:"DstPodIP"`
	TaskParam  string `json:"TaskParam"`
	TaskType   string `json:"TaskType"`
	TaskStatus int    `json:"TaskStatus"`
	TaskResult string `json:"TaskResult"`
	TaskState  string `json:"TaskState"`            // the named state behind TaskStatus
	TaskReason string `json:"TaskReason,omitempty"` // why it failed, timed out or was cancelled
	// TaskLateReason: the result arrived after the server had ended the
	// task for its agent's absence with this reason (see TaskV2.LateReason).
	TaskLateReason string    `json:"TaskLateReason,omitempty"`
	CreateTime     time.Time `json:"CreateTime"`
	UpdateTime     time.Time `json:"UpdateTime"`
}

// MaxNodeLabels bounds the node labels a heartbeat reports.
const MaxNodeLabels = 8

// Heartbeat is what an agent says about itself once a second (the seed's
// "client global context"), on both API versions.
type Heartbeat struct {
	PodName       string `json:"pod_name"`
	PodNamespace  string `json:"pod_namespace,omitempty"`
	PodUID        string `json:"pod_uid"`
	PodIP         string `json:"pod_ip"`
	NodeName      string `json:"node_name"`
	NodeIP        string `json:"node_ip,omitempty"`
	HostNetwork   bool   `json:"host_network,omitempty"`
	ResponderAddr string `json:"responder_addr,omitempty"`
	Version       string `json:"version,omitempty"`
	// NodeLabels are labels of the agent's node it reports (its zone
	// labels: topology.kubernetes.io/zone and the one it is told), for
	// the pair plans by zone; at most MaxNodeLabels.
	NodeLabels map[string]string `json:"node_labels,omitempty"`
	// Running lists the task ids the agent is executing now.
	Running []string `json:"running,omitempty"`
	// BootID is chosen by the agent at start. A new one means the agent
	// restarted and lost the tasks it held: the server fails them at once
	// instead of at their deadline.
	BootID string `json:"boot_id,omitempty"`
	// ResponderKey is the secret (64 hex digits, new at every agent start)
	// from which the server derives the test keys of the tasks aimed at
	// this agent's responder. The server keeps it in memory only.
	ResponderKey string `json:"responder_key,omitempty"`
	// Undelivered lists the tasks the agent finished whose reports the
	// server has not acknowledged yet (kept on disk across a restart): the
	// agent holds them, so they are neither re-offered nor failed as lost.
	Undelivered []string `json:"undelivered,omitempty"`
}

// HeartbeatReply answers a heartbeat.
type HeartbeatReply struct {
	AgentID int64 `json:"agent_id"`
	// Cancel lists task ids the agent is running that it must stop.
	Cancel []string `json:"cancel,omitempty"`
}

// Report is an agent's result for one task (v1 report_task and v2 report).
type Report struct {
	TaskID string `json:"task_id"`
	PodUID string `json:"pod_uid"`
	// ReportID makes delivery idempotent: the agent sends the same id on
	// every retry.
	ReportID string `json:"report_id"`
	// State is the final state (succeeded, failed, timed_out, cancelled);
	// v1 clients may send TaskStatus (3-6) instead.
	State      string          `json:"state,omitempty"`
	TaskStatus int             `json:"task_status,omitempty"`
	TaskResult string          `json:"task_result,omitempty"` // raw tool output
	Result     json.RawMessage `json:"result,omitempty"`      // typed probe.Result
	Reason     string          `json:"reason,omitempty"`
}

// ReportReply acknowledges a report.
type ReportReply struct {
	TaskID string `json:"task_id"`
	State  string `json:"state"`
	// Duplicate: the report stored no result, the task's outcome was
	// there already (the same report again, or a cancelled report that
	// only acknowledges the end of a task ended before).
	Duplicate bool `json:"duplicate"`
}

// AgentTask is a task as handed to its source agent.
type AgentTask struct {
	TaskID string      `json:"task_id"`
	RunID  string      `json:"run_id,omitempty"`
	Type   string      `json:"type"`
	Param  string      `json:"param,omitempty"`
	Spec   *probe.Spec `json:"spec,omitempty"`
	// QoS is the set-up the agent applies on its own interface around a
	// probe task.
	QoS       *qosspec.Spec `json:"qos,omitempty"`
	SrcPodIP  string        `json:"src_pod_ip"`
	DstPodUID string        `json:"dst_pod_uid"`
	DstPodIP  string        `json:"dst_pod_ip"`
	// Deadline is when the server stops waiting for the result.
	Deadline time.Time `json:"deadline,omitzero"`
	// TimeoutS is how long the task may run, in seconds.
	TimeoutS float64 `json:"timeout_s"`
	// DstPort is the port of the iperf/iperf3 server the destination agent
	// started for this task (0: the tool's default).
	DstPort int `json:"dst_port,omitempty"`
	// ServeError, when set, says why the destination could not start its
	// server; the agent reports the task failed with it.
	ServeError string `json:"serve_error,omitempty"`
	// TestKey is the task's one-time key for the destination agent's
	// responder (probe.Env.TestKey); it expires with Deadline.
	TestKey string `json:"test_key,omitempty"`
}

// ServeRequest asks a destination agent to start the server side of an
// iperf or iperf3 task (handed out before the task goes to its source).
type ServeRequest struct {
	TaskID string `json:"task_id"`
	Tool   string `json:"tool"` // iperf or iperf3
	UDP    bool   `json:"udp"`  // iperf2 UDP server (-u)
	// Bind is the address to listen on (the destination pod's IP).
	Bind string `json:"bind"`
	// TimeoutS bounds how long the server is kept.
	TimeoutS float64 `json:"timeout_s"`
}

// Serving is a destination agent's answer to a ServeRequest.
type Serving struct {
	PodUID string `json:"pod_uid"`
	Port   int    `json:"port,omitempty"`
	Error  string `json:"error,omitempty"`
}

// FetchReply answers an agent's task fetch.
type FetchReply struct {
	Tasks []AgentTask `json:"tasks"`
	// Serve lists servers the agent must start as a task's destination.
	Serve []ServeRequest `json:"serve,omitempty"`
	// Cancel lists task ids the agent must stop.
	Cancel []string `json:"cancel,omitempty"`
}
