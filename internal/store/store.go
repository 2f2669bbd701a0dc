// Package store keeps cnperf's control-plane state: agents (registered by
// heartbeat), tasks and their life cycle, and runs that group tasks. One
// interface, Store, is implemented once over database/sql (sqlstore.go, with
// the queries by concern in agents.go, runs.go, tasks.go, dispatch.go and
// paging.go) for each SQL dialect (dialect.go): SQLite (modernc.org/sqlite,
// pure Go, WAL), PostgreSQL (pgx/v5) and MySQL 8 / MariaDB
// (go-sql-driver/mysql), all passing the same conformance suite (package
// storetest). What differs between databases (placeholders, RETURNING,
// upserts, time and JSON encodings, locks) comes from the dialect. Open
// picks one by the DSN's prefix and applies the schema migrations embedded
// in the binary.
//
// Guarantees shared by every implementation:
//   - Every operation that changes more than one row runs in one
//     transaction: it happens completely or not at all.
//   - Task state only moves forward along the life cycle
//     pending → dispatched → running → succeeded | failed | timed_out |
//     cancelled (running may be skipped); an illegal transition is
//     ErrConflict and changes nothing. Every change stamps UpdatedAt, and
//     every failure, expiry and cancellation carries a Reason.
//   - ClaimTasks never hands the same task out twice, however many callers
//     claim at once, in one process or several.
//   - The store never reads the wall clock: every operation that stamps a
//     time takes it as an argument, so tests inject a clock.
//   - Times are stored with microsecond precision and returned in UTC.
//
// What it needs: a writable file for SQLite, or a reachable PostgreSQL or
// MySQL database whose user may create tables (for the migrations).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Sentinel errors. Callers test them with errors.Is; the HTTP server maps
// them to status codes in one place.
var (
	// ErrNotFound: no such agent, task or run (or, for an agent's
	// operation on a task, the task is not that agent's).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the operation is not allowed in the current state (an
	// illegal state transition, a result report for a task that already
	// finished under another report ID) or a unique key already exists.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: an argument is malformed (unknown state, missing field).
	// The wrapped message names the field.
	ErrInvalid = errors.New("invalid argument")
)

// AgentStatus is the seed's ClientStatus code.
type AgentStatus int

// Agent status codes (the seed's values).
const (
	AgentFree    AgentStatus = 1 // online, not running a task
	AgentBusy    AgentStatus = 2 // online, running at least one task
	AgentOffline AgentStatus = 3 // silent for too long (set by MarkSilentOffline)
)

// Online reports whether the status is free or busy.
func (s AgentStatus) Online() bool { return s == AgentFree || s == AgentBusy }

// String returns "free", "busy", "offline" or "unknown(N)".
func (s AgentStatus) String() string {
	switch s {
	case AgentFree:
		return "free"
	case AgentBusy:
		return "busy"
	case AgentOffline:
		return "offline"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// Agent is one cnperf agent, identified by the UID of its pod.
type Agent struct {
	ID            int64  // serial, assigned on first heartbeat
	PodUID        string // unique key
	PodName       string
	PodNamespace  string
	PodIP         string
	NodeName      string
	NodeIP        string
	HostNetwork   bool
	ResponderAddr string // HOST:PORT of the agent's cnperf responder
	Version       string
	// NodeLabels are labels of its node the agent reported (its zone
	// labels), at most MaxNodeLabelsLen bytes as JSON.
	NodeLabels    map[string]string
	Status        AgentStatus
	RegisterTime  time.Time // first heartbeat; kept across offline periods
	LastHeartbeat time.Time // the seed's UpdateTime
	// HeldBy is the replica holding the agent's session (the holder of
	// its live presence lease) when GetAgents read it; "" when none does,
	// and in every other read.
	HeldBy string
}

// MaxNodeLabelsLen bounds an agent's node labels as stored (JSON).
const MaxNodeLabelsLen = 2048

// Touch is one heartbeat for TouchAgents.
type Touch struct {
	PodUID string
	Status AgentStatus // AgentFree or AgentBusy
	At     time.Time   // the heartbeat's time (becomes LastHeartbeat)
}

// Presence is one change of where an agent holds its session, for
// SetPresence.
type Presence struct {
	PodUID string
	// Held: the agent's session is open on the lease's replica. False:
	// the session there ended.
	Held bool
	// At is, for a release, the agent's last sign of life (rounded down
	// to the second); zero: the call's now. Holds take now.
	At time.Time
}

// Time is the LastHeartbeat p gives its agent when written at now: now
// for a hold, At rounded down to the second for a release that names it.
func (p Presence) Time(now time.Time) time.Time {
	if !p.Held && !p.At.IsZero() {
		return p.At.Truncate(time.Second)
	}
	return now
}

// AgentFilter selects agents for ListAgents.
type AgentFilter struct {
	IncludeOffline bool   // false: only free and busy agents (the seed's default)
	Node           string // non-empty: only agents on this node
}

// TaskState is a task's place in its life cycle.
type TaskState string

// Task states.
const (
	TaskPending    TaskState = "pending"    // created, waiting for its source agent
	TaskDispatched TaskState = "dispatched" // handed to the source agent by ClaimTasks
	TaskRunning    TaskState = "running"    // the agent said it started
	TaskSucceeded  TaskState = "succeeded"
	TaskFailed     TaskState = "failed"
	TaskTimedOut   TaskState = "timed_out"
	TaskCancelled  TaskState = "cancelled"
)

// TaskStates lists every state in life-cycle order.
var TaskStates = []TaskState{TaskPending, TaskDispatched, TaskRunning, TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled}

// Terminal reports whether no further transition is possible.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled:
		return true
	}
	return false
}

// Active reports whether the task is with an agent (dispatched or running).
func (s TaskState) Active() bool { return s == TaskDispatched || s == TaskRunning }

// Valid reports whether s is one of the seven states.
func (s TaskState) Valid() bool {
	for _, v := range TaskStates {
		if s == v {
			return true
		}
	}
	return false
}

// Reasons the store itself writes.
const (
	ReasonAgentOffline   = "agent went offline"
	ReasonDeadlinePassed = "deadline passed"
	ReasonCancelled      = "cancelled" // Cancel and CancelRun with an empty reason
)

// Task is one measurement from a source agent to a destination agent.
type Task struct {
	ID        int64  // serial, assigned by the store; orders tasks and pages
	TaskID    string // public ID (UUID); generated by CreateTasks when empty
	RunID     string // empty for v1 tasks
	SrcPodUID string
	SrcPodIP  string
	DstPodUID string
	DstPodIP  string
	Type      string          // v1: ping, iperf, iperf3, traceroute; v2: probe
	Param     string          // v1 task_param text
	Spec      json.RawMessage // v2 probe spec (probe.Spec JSON); nil for v1
	State     TaskState
	Reason    string // why it failed, timed out or was cancelled
	// RawSize is the length in bytes of the raw tool output (the seed's
	// TaskResult), which is stored apart (TaskOutput) so that task rows,
	// listings and run answers stay small.
	RawSize int64
	Result  json.RawMessage // typed probe.Result JSON; nil when none
	// Exclusive marks a throughput test: no two exclusive tasks are
	// dispatched or running at once on a node that an endpoint of either is
	// on, unless the task's run allows concurrency.
	Exclusive    bool
	Timeout      time.Duration // how long the task may run once dispatched
	Deadline     *time.Time    // set by ClaimTasks: dispatch time + Timeout + grace
	CreatedAt    time.Time
	DispatchedAt *time.Time
	StartedAt    *time.Time
	FinishedAt   *time.Time
	UpdatedAt    time.Time
	ReportID     string // idempotency key of the accepted result report
	// LateReason is set when the result arrived after the server had
	// ended the task for its agent's absence (ReasonAgentOffline,
	// ReasonDeadlinePassed): the reason it was first ended with. The
	// result is stored all the same (Complete); "" for a result in time.
	LateReason string
	// StoppedAt is when the agent acknowledged the end of a task it was
	// told to stop: its cancelled report, which it sends once it has
	// stopped the task and removed any QoS set-up (Complete); nil until
	// then. StopReason is that report's reason.
	StoppedAt  *time.Time
	StopReason string
}

// TaskFilter selects tasks for ListTasks. Zero fields match everything.
type TaskFilter struct {
	RunID    string
	State    TaskState
	AgentUID string // tasks whose source or destination is this pod UID
	Type     string
	// DispatchedAfter and DispatchedBefore, when set, keep tasks
	// dispatched at or after the one and before the other.
	DispatchedAfter, DispatchedBefore time.Time
}

// CreateClaim says what CreateRunAndClaim claims.
type CreateClaim struct {
	Limit  int           // tasks per source, at most (ClaimTasks' limit)
	Grace  time.Duration // added to a claimed task's timeout for its deadline
	Except []string      // task types never claimed at creation
	// Notify, when set, is called inside the transaction with the tasks
	// it claimed and, by source pod UID, the replica holding that
	// source's session (its presence lease's holder). The notices it
	// returns are sent in the same transaction: PostgreSQL delivers a
	// NOTIFY at the commit, and never if the transaction rolls back, so
	// the offers reach the other replicas with the tasks' rows and with
	// no round trip of their own. Only a PostgreSQL store sends notices;
	// the others refuse any.
	Notify func(claimed []Task, heldBy map[string]string) []Notice
	// Agents, when set and holding every endpoint of the tasks to claim,
	// are those endpoints as the caller read them just before (GetAgents,
	// by pod UID): their status and HeldBy decide what is claimed, and
	// the transaction reads no agents of its own (one statement less on
	// every task's dispatch latency; the read inside the transaction
	// locked nothing either). Otherwise the transaction reads them.
	Agents map[string]Agent
}

// Notice is one message on a PostgreSQL NOTIFY channel.
type Notice struct {
	Channel, Payload string
}

// Page asks for one page of a listing ordered by ascending ID.
type Page struct {
	Limit   int   // 0 means DefaultPageLimit; capped at MaxPageLimit
	AfterID int64 // only items with ID (Run.Seq for runs) greater than this
}

// Paging limits.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Report is an agent's result report for one of its tasks.
type Report struct {
	TaskID    string
	AgentUID  string    // must be the task's source agent
	ReportID  string    // idempotency key chosen by the agent; required
	State     TaskState // succeeded, failed, timed_out or cancelled
	RawResult string
	Result    json.RawMessage
	Reason    string
}

// RunState is the state of a run.
type RunState string

// Run states.
const (
	RunRunning   RunState = "running"
	RunSucceeded RunState = "succeeded"
	RunFailed    RunState = "failed"
	RunCancelled RunState = "cancelled"
)

// Terminal reports whether the run is over.
func (s RunState) Terminal() bool { return s == RunSucceeded || s == RunFailed || s == RunCancelled }

// Valid reports whether s is one of the four run states.
func (s RunState) Valid() bool { return s == RunRunning || s.Terminal() }

// Run groups tasks created together.
type Run struct {
	ID               string // UUID; generated by CreateRun when empty
	Seq              int64  // serial, assigned by the store; orders runs and pages
	Suite            string // "tasks" for a plain task list, or a suite name
	Params           json.RawMessage
	State            RunState
	AllowConcurrency bool // exclusive tasks of this run may overlap
	CreatedAt        time.Time
	UpdatedAt        time.Time
	FinishedAt       *time.Time
	// Counts holds the number of the run's tasks in each state (computed;
	// states with no task are absent).
	Counts map[TaskState]int
}

// Total returns the number of tasks in the run.
func (r Run) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// RunFilter selects runs for ListRuns. Zero fields match everything.
type RunFilter struct {
	State RunState
	Suite string
	// CreatedSince, when set, keeps runs created at or after it (the ping
	// mesh's rounds of an availability window).
	CreatedSince time.Time
}

// Store is the control plane's persistent state. All methods are safe for
// concurrent use.
type Store interface {
	// UpsertHeartbeat records one heartbeat in one statement: an unknown
	// PodUID is registered (new ID, RegisterTime = now); a known one keeps
	// its ID and RegisterTime and gets the other fields from a, with
	// LastHeartbeat = now. a.Status must be AgentFree or AgentBusy (zero
	// means AgentFree), so an offline agent comes back online. Returns the
	// stored agent.
	UpsertHeartbeat(ctx context.Context, a Agent, now time.Time) (Agent, error)
	// UpsertHeartbeats records many heartbeats, as UpsertHeartbeat would, in
	// one transaction: all or none. Duplicate PodUIDs in one batch: the
	// last one wins.
	UpsertHeartbeats(ctx context.Context, agents []Agent, now time.Time) error
	// RegisterAgents is UpsertHeartbeats returning the stored agents in the
	// order given (the server's batched registrations).
	RegisterAgents(ctx context.Context, agents []Agent, now time.Time) ([]Agent, error)
	// TouchAgents records heartbeats of agents that are online and whose
	// identity did not change: LastHeartbeat = the touch's At and its status
	// (free or busy), in one transaction, a few hundred rows per statement
	// (touches sharing a status and time share a statement). Agents that
	// are unknown or offline are left alone (their next heartbeat goes
	// through UpsertHeartbeat), and so is an agent whose stored time is
	// later than the touch's (server replicas: one the agent left may
	// flush an older time). Returns the rows changed.
	TouchAgents(ctx context.Context, touches []Touch) (int, error)
	// GetAgent returns the agent with this pod UID, or ErrNotFound.
	GetAgent(ctx context.Context, podUID string) (Agent, error)
	// GetAgents returns the agents with these pod UIDs, those that exist,
	// in no particular order, in one query per few hundred UIDs (a run's
	// endpoints, read at its creation), each with HeldBy as of now.
	GetAgents(ctx context.Context, podUIDs []string, now time.Time) ([]Agent, error)
	// ListAgents returns the agents matching f, ordered by ID.
	ListAgents(ctx context.Context, f AgentFilter) ([]Agent, error)
	// SetPresence records sessions opened and ended on the replica whose
	// presence lease is lease (a lease HoldLease keeps alive): a held
	// agent's row names lease, whoever named it before (the newest session
	// wins), and a released one's row names none, if it named lease (the
	// agent may hold a newer session elsewhere). A hold moves the agent's
	// LastHeartbeat to now, a release to its At (now when zero), unless it
	// is later: a released agent's silence counts from then. Offline and unknown agents are
	// held too (a held row coming online again is held). In one
	// transaction; returns the rows changed.
	SetPresence(ctx context.Context, lease string, ps []Presence, now time.Time) (int, error)
	// MarkSilentOffline sets every online agent whose LastHeartbeat is
	// before silentSince to AgentOffline, atomically, and returns them,
	// except the agents whose rows name a lease alive at now (their
	// sessions are open: SetPresence). It does not touch their tasks: the
	// caller calls FailAgentTasks.
	MarkSilentOffline(ctx context.Context, silentSince, now time.Time) ([]Agent, error)

	// CreateRun stores a run (State RunRunning, CreatedAt = now) and its
	// tasks in one transaction: all or nothing. Tasks are validated as by
	// CreateTasks and get RunID = the run's ID.
	CreateRun(ctx context.Context, r Run, tasks []Task, now time.Time) (Run, []Task, error)
	// CreateRunAndClaim is CreateRun that also claims, in the same
	// transaction, the new tasks ClaimCreated would claim right after
	// (sources held by a live presence lease, destinations online, the
	// exclusive rule, at most c.Limit per source, types in c.Except
	// never): they are stored dispatched (DispatchedAt = now, Deadline =
	// now + Timeout + c.Grace), the others pending. One transaction, and
	// one write of each task, for a run created and handed out at once.
	CreateRunAndClaim(ctx context.Context, r Run, tasks []Task, now time.Time, c CreateClaim) (Run, []Task, error)
	// GetRun returns the run with its per-state task counts, or ErrNotFound.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns returns one page of runs matching f ordered by Seq, with
	// their counts, and the total number of matching runs.
	ListRuns(ctx context.Context, f RunFilter, p Page) ([]Run, int, error)
	// CountRuns returns the number of runs matching f, in one query.
	CountRuns(ctx context.Context, f RunFilter) (int, error)
	// UpdateRunState moves a running run to a terminal state (stamping
	// FinishedAt). Setting the state it already has is a no-op; any other
	// change of a finished run is ErrConflict. The store also finishes a
	// run by itself, in the same transaction, when its last task reaches a
	// terminal state: succeeded when all its tasks succeeded, else failed.
	UpdateRunState(ctx context.Context, id string, state RunState, now time.Time) (Run, error)
	// CancelRun cancels every non-terminal task of the run with the reason
	// and sets the run cancelled, in one transaction. A finished run is
	// ErrConflict, except that cancelling a cancelled run is a no-op.
	CancelRun(ctx context.Context, id, reason string, now time.Time) (Run, error)

	// CreateTasks stores tasks as pending (CreatedAt = UpdatedAt = now) in
	// one transaction: if any task is invalid (missing source, destination
	// or type, negative timeout, malformed JSON, unknown run, duplicate
	// TaskID) nothing is stored and the error (ErrInvalid, ErrNotFound for
	// the run, ErrConflict for a duplicate) names the index of the bad
	// task. runID may be empty (v1 tasks); it overrides each Task.RunID.
	// Returns the tasks as stored, with ID and TaskID assigned, in order.
	CreateTasks(ctx context.Context, runID string, tasks []Task, now time.Time) ([]Task, error)
	// GetTask returns the task with this public TaskID, or ErrNotFound.
	GetTask(ctx context.Context, taskID string) (Task, error)
	// TaskOutput returns the task's raw tool output ("" when it has none).
	// Unknown task: ErrNotFound.
	TaskOutput(ctx context.Context, taskID string) (string, error)
	// TaskOutputChunk returns at most n characters (not bytes) of the
	// task's raw output, from character off (0-based): "" past its end, or
	// when the task has no output or is unknown. The server streams an
	// output chunk by chunk, never holding it whole.
	TaskOutputChunk(ctx context.Context, taskID string, off, n int64) (string, error)
	// ListTasks returns one page of tasks matching f ordered by ID, and the
	// total number of matching tasks (ignoring the page).
	ListTasks(ctx context.Context, f TaskFilter, p Page) ([]Task, int, error)
	// ClaimTasks atomically moves up to limit pending tasks whose source is
	// agentUID to dispatched (DispatchedAt = now, Deadline = now + Timeout +
	// grace) and returns them, oldest first. A task is only claimed when
	// its destination agent is online, and, if it is exclusive (and its run
	// does not allow concurrency), when no other such exclusive task is
	// dispatched or running on a node either of its endpoints is on
	// (counting the tasks claimed in the same call). Concurrent calls never
	// return the same task twice. No match: an empty slice, no error.
	ClaimTasks(ctx context.Context, agentUID string, now time.Time, limit int, grace time.Duration) ([]Task, error)
	// ClaimCreated claims, as ClaimTasks does (the same exclusive rule, at
	// most limit per source, oldest first), among the tasks with these ids
	// (at most 1,000; tasks just created), those that can go to their
	// source now: pending, the destination online, and the source online
	// and held by a live presence lease (an open session). The others
	// stay pending for their source's own claim. The server calls it
	// right after creating tasks, so that a run's tasks cost one claim
	// transaction, not one per source.
	ClaimCreated(ctx context.Context, ids []int64, now time.Time, limit int, grace time.Duration) ([]Task, error)
	// MarkRunning moves the agent's dispatched task to running (StartedAt =
	// now). Already running: a no-op returning the task. Pending or
	// terminal: ErrConflict. Another agent's task: ErrNotFound.
	MarkRunning(ctx context.Context, taskID, agentUID string, now time.Time) (Task, error)
	// Complete stores an agent's result for its dispatched or running task
	// and moves it to r.State (FinishedAt = now), idempotently: a report
	// whose ReportID equals the stored one returns the stored task and
	// duplicate = true without writing anything, and so does a report
	// under another ReportID that says exactly what is stored (state,
	// reason, raw and typed result: results are deduplicated by task). A
	// different report for a task that is already terminal is ErrConflict,
	// as is a report for a pending task, with two exceptions. A late
	// result (succeeded, failed or timed out) for a task the server ended
	// for its agent's absence (failed ReasonAgentOffline or timed out
	// ReasonDeadlinePassed, no report stored) is stored as any result,
	// with LateReason = the reason it was ended with, and a finished run
	// of it is judged again (succeeded when all its tasks now succeeded).
	// A cancelled report for a task that is already terminal (the agent
	// stopped a task the server had ended) is the agent's acknowledgement:
	// the first sets StoppedAt = now and StopReason and is duplicate =
	// false, the state, reason, result and ReportID untouched; later ones
	// write nothing and are duplicate = true. A cancelled report stored as
	// the task's result sets StoppedAt too. Another agent's task:
	// ErrNotFound.
	Complete(ctx context.Context, r Report, now time.Time) (t Task, duplicate bool, err error)
	// Cancel moves a pending, dispatched or running task to cancelled with
	// the reason (ReasonCancelled when empty). Already cancelled: a no-op
	// returning the task. Otherwise terminal: ErrConflict.
	Cancel(ctx context.Context, taskID, reason string, now time.Time) (Task, error)
	// FailAgentTasks moves every dispatched or running task whose source is
	// agentUID to failed with the reason (ReasonAgentOffline when empty),
	// atomically, and returns them. Pending tasks stay pending.
	FailAgentTasks(ctx context.Context, agentUID, reason string, now time.Time) ([]Task, error)
	// FailGoneAgentTasks moves every pending task whose source or
	// destination agent is gone (offline, and silent since before
	// goneBefore) to failed with ReasonAgentGone (the agent's uid and
	// LastHeartbeat), finishes their runs, and returns them. An agent that
	// comes back online before the update keeps its tasks. Without it a
	// task for an agent that never returns stays pending, and its run in
	// flight, for ever.
	FailGoneAgentTasks(ctx context.Context, goneBefore, now time.Time) ([]Task, error)
	// ExpireDeadlines moves every dispatched or running task whose Deadline
	// is before now to timed_out with ReasonDeadlinePassed, atomically, and
	// returns them.
	ExpireDeadlines(ctx context.Context, now time.Time) ([]Task, error)

	// CreateCredential stores an agent's credential (CreatedAt = now).
	// The agent holding one already, or the hash being taken: ErrConflict.
	CreateCredential(ctx context.Context, c Credential, now time.Time) (Credential, error)
	// CredentialByHash returns the live credential with this hash, or
	// ErrNotFound (a revoked credential is not found by its hash).
	CredentialByHash(ctx context.Context, hash string) (Credential, error)
	// GetCredential returns the agent's credential, revoked or not, or
	// ErrNotFound.
	GetCredential(ctx context.Context, podUID string) (Credential, error)
	// RevokeCredential marks the agent's live credential revoked at now
	// and returns it; none live: ErrNotFound. The uid stays taken: the
	// join token cannot join it again until ForgetCredential.
	RevokeCredential(ctx context.Context, podUID string, now time.Time) (Credential, error)
	// ForgetCredential deletes the agent's credential, revoked or not, so
	// that its uid may join afresh; none: ErrNotFound.
	ForgetCredential(ctx context.Context, podUID string) error

	// HoldLease takes or renews the leader lease name for holder until
	// now+ttl (leases.go): held when free, already the holder's, or
	// expired at now; otherwise the current holder is reported.
	HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (Lease, error)
	// ReleaseLease ends holder's hold of name (nothing when not held).
	ReleaseLease(ctx context.Context, name, holder string) error
	// DropExpiredLeases deletes the leases whose names start with prefix
	// and that expired before before (presence leases of replicas gone for
	// good); returns how many.
	DropExpiredLeases(ctx context.Context, prefix string, before time.Time) (int, error)

	// CreateSchedule stores a schedule (CreatedAt = now; NextAt = now when
	// zero). An empty suite, a non-positive Every or malformed JSON is
	// ErrInvalid; an existing id ErrConflict.
	CreateSchedule(ctx context.Context, sc Schedule, now time.Time) (Schedule, error)
	// GetSchedule returns the schedule, or ErrNotFound.
	GetSchedule(ctx context.Context, id string) (Schedule, error)
	// ListSchedules returns every schedule, oldest first.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// DueSchedules returns the schedules whose NextAt is at or before now.
	DueSchedules(ctx context.Context, now time.Time) ([]Schedule, error)
	// DeleteSchedule deletes the schedule and its history (not the runs it
	// made) in one transaction and returns it; unknown: ErrNotFound.
	DeleteSchedule(ctx context.Context, id string) (Schedule, error)
	// StartScheduleRun claims the schedule's due time and records it, in
	// one transaction: it moves NextAt from due to next only if NextAt is
	// still due (else ErrConflict: another server claimed it, or the
	// schedule changed; ErrNotFound when it is gone), so among servers
	// sharing the database exactly one starts each due time. The record is
	// running, or skipped (finished at once, with the reason) when a run
	// of the schedule that beat at or after staleBefore is still running.
	StartScheduleRun(ctx context.Context, id string, due, next, now, staleBefore time.Time) (ScheduleRun, error)
	// BeatScheduleRun refreshes a running record's BeatAt and its run ids;
	// a record that is no longer running (or gone) is ErrNotFound, which
	// tells its runner to stop.
	BeatScheduleRun(ctx context.Context, runID int64, runIDs []string, now time.Time) error
	// FinishScheduleRun ends a running record as succeeded or failed with
	// the reason, run ids and summary; not running: ErrNotFound.
	FinishScheduleRun(ctx context.Context, runID int64, state ScheduleRunState, reason string, runIDs []string, summary json.RawMessage, now time.Time) (ScheduleRun, error)
	// AbandonScheduleRuns fails every running record whose BeatAt is
	// before staleBefore (its server stopped) and returns them.
	AbandonScheduleRuns(ctx context.Context, staleBefore, now time.Time) ([]ScheduleRun, error)
	// ListScheduleRuns returns a schedule's history, newest first.
	ListScheduleRuns(ctx context.Context, f ScheduleRunFilter) ([]ScheduleRun, error)

	// RecordMatrixPair keeps a matrix measurement as its pair's latest of
	// its kind (an older one does not replace a newer).
	RecordMatrixPair(ctx context.Context, p MatrixPair) error
	// ListMatrixPairs returns the kept measurements of the pairs sent
	// from srcs (1 to MaxMatrixSenders nodes): a page of the coverage.
	ListMatrixPairs(ctx context.Context, srcs []string) ([]MatrixPair, error)
	// MatrixNodes returns the senders and receivers of the kept
	// measurements (a node may come twice).
	MatrixNodes(ctx context.Context) ([]string, error)
	// TallyMatrixPairs counts the kept pairs, and those measured before
	// a time.
	TallyMatrixPairs(ctx context.Context, before time.Time) (MatrixTally, error)

	// Ping checks that the database answers (for /readyz).
	Ping(ctx context.Context) error
	// CheckWrite makes one small real write (a row of its own, rewritten
	// in a transaction of its own), so that readiness fails when the
	// database answers reads but cannot write: disk full, read-only file
	// system, a replica instead of the primary.
	CheckWrite(ctx context.Context) error
	// Close releases the database. The Store must not be used afterwards.
	Close() error
}
