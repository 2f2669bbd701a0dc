package api

import "time"

// Agent sessions: one long-lived HTTP request per agent (POST
// /api/v2/agent/session?pod_uid=), full duplex, whose request and answer
// bodies are streams of SessionFrame, one JSON object per line (NDJSON).
// It carries what the polling agent sends as separate requests: presence
// (the open session plus a keep-alive frame), task offers and their
// acknowledgements, start, the iperf hand-off and results. See
// docs/control-plane.md, "Agent sessions".

// SessionPath is the session endpoint.
const SessionPath = "/api/v2/agent/session"

// Session frame types. The agent sends hello (first), heartbeat, pull,
// ack, start, serving, report and keepalive; the server sends welcome,
// offer, reply, keepalive and bye.
const (
	FrameHello     = "hello"     // agent: its heartbeat; answered by welcome
	FrameWelcome   = "welcome"   // server: the heartbeat reply and the keep-alive period
	FrameHeartbeat = "heartbeat" // agent: its heartbeat again (its lists changed); answered by reply
	FramePull      = "pull"      // agent: it has room for tasks (one offer of tasks answers it)
	FrameOffer     = "offer"     // server: tasks, server requests, cancellations
	FrameAck       = "ack"       // agent: it holds these offered tasks
	FrameStart     = "start"     // agent: it started a task; answered by reply
	FrameServing   = "serving"   // agent: its iperf server for a task is ready (or not); answered by reply
	FrameReport    = "report"    // agent: a task's result; answered by reply
	FrameReply     = "reply"     // server: the answer to the agent's frame with the same seq
	FrameKeepalive = "keepalive" // either side: presence; the server echoes the agent's
	FrameBye       = "bye"       // server: the session ends (error says why)
)

// KeepaliveLine is the agent's keep-alive frame as sent, byte for byte,
// so the server recognises it without decoding.
const KeepaliveLine = `{"type":"keepalive"}`

// SessionFrame is one line of a session in either direction. Seq pairs a
// request frame (heartbeat, start, serving, report) with its reply.
type SessionFrame struct {
	Type string `json:"type"`
	Seq  uint64 `json:"seq,omitempty"`
	// TaskID names the task of a start or serving frame.
	TaskID string `json:"task_id,omitempty"`
	// TaskIDs lists the tasks an ack acknowledges.
	TaskIDs   []string        `json:"task_ids,omitempty"`
	Heartbeat *Heartbeat      `json:"heartbeat,omitempty"`
	Serving   *Serving        `json:"serving,omitempty"`
	Report    *Report         `json:"report,omitempty"`
	Reply     *HeartbeatReply `json:"heartbeat_reply,omitempty"`
	Reported  *ReportReply    `json:"reported,omitempty"`
	Offer     *FetchReply     `json:"offer,omitempty"`
	// KeepaliveS is the keep-alive period the server asks for (welcome).
	KeepaliveS float64 `json:"keepalive_s,omitempty"`
	// Error is a refused frame's error (reply) or why the session ends
	// (bye); Status is its HTTP status.
	Error  *ErrorBody `json:"error,omitempty"`
	Status int        `json:"status,omitempty"`
}

// DefaultKeepalive is the keep-alive period of a session. The open session
// is the agent's presence (the server writes it to the store when the
// session opens and ends), so the period only bounds how long a peer that
// vanished without closing the connection goes unnoticed: the server ends
// a session silent for two periods and a second (21 s), the agent one
// whose echo is two periods late (20 s). A keep-alive costs the server a
// read, a write and their wake-ups (most of its CPU per agent): 10 s, as
// Kubernetes renews a node's Lease, halves them against 5 s
// (docs/control-plane.md, "Server CPU per agent").
const DefaultKeepalive = 10 * time.Second
