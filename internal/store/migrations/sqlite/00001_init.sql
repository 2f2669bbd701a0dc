-- Initial schema (SQLite). Times are INTEGER microseconds since the Unix
-- epoch (UTC); durations INTEGER nanoseconds; booleans 0/1; JSON as TEXT.

-- +goose Up
CREATE TABLE agents (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    pod_uid        TEXT    NOT NULL UNIQUE,
    pod_name       TEXT    NOT NULL DEFAULT '',
    pod_namespace  TEXT    NOT NULL DEFAULT '',
    pod_ip         TEXT    NOT NULL DEFAULT '',
    node_name      TEXT    NOT NULL DEFAULT '',
    node_ip        TEXT    NOT NULL DEFAULT '',
    host_network   BOOLEAN NOT NULL DEFAULT FALSE,
    responder_addr TEXT    NOT NULL DEFAULT '',
    version        TEXT    NOT NULL DEFAULT '',
    status         INTEGER NOT NULL CHECK (status IN (1, 2, 3)),
    register_time  INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL
);
-- MarkSilentOffline, ListAgents.
CREATE INDEX agents_status_heartbeat ON agents (status, last_heartbeat);
CREATE INDEX agents_node ON agents (node_name);

CREATE TABLE runs (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    id                TEXT    NOT NULL UNIQUE,
    suite             TEXT    NOT NULL,
    params            TEXT,
    state             TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    allow_concurrency BOOLEAN NOT NULL DEFAULT FALSE,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    finished_at       INTEGER
);
CREATE INDEX runs_state ON runs (state, seq);

CREATE TABLE tasks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT    NOT NULL UNIQUE,
    run_id        TEXT    REFERENCES runs (id),
    src_pod_uid   TEXT    NOT NULL,
    src_pod_ip    TEXT    NOT NULL DEFAULT '',
    dst_pod_uid   TEXT    NOT NULL,
    dst_pod_ip    TEXT    NOT NULL DEFAULT '',
    type          TEXT    NOT NULL,
    param         TEXT    NOT NULL DEFAULT '',
    spec          TEXT,
    state         TEXT    NOT NULL CHECK (state IN ('pending', 'dispatched', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled')),
    reason        TEXT    NOT NULL DEFAULT '',
    raw_result    TEXT    NOT NULL DEFAULT '',
    result        TEXT,
    exclusive     BOOLEAN NOT NULL DEFAULT FALSE,
    timeout_ns    INTEGER NOT NULL DEFAULT 0,
    deadline      INTEGER,
    created_at    INTEGER NOT NULL,
    dispatched_at INTEGER,
    started_at    INTEGER,
    finished_at   INTEGER,
    updated_at    INTEGER NOT NULL,
    report_id     TEXT    NOT NULL DEFAULT ''
);
-- ClaimTasks (pending tasks of one source), FailAgentTasks, ListTasks by agent.
CREATE INDEX tasks_src_state ON tasks (src_pod_uid, state, id);
CREATE INDEX tasks_dst_state ON tasks (dst_pod_uid, state, id);
-- ExpireDeadlines, the exclusive-node check, ListTasks by state.
CREATE INDEX tasks_state_deadline ON tasks (state, deadline);
-- Run counts, run completion, ListTasks by run.
CREATE INDEX tasks_run_state ON tasks (run_id, state);
CREATE INDEX tasks_type ON tasks (type, id);

-- +goose Down
DROP TABLE tasks;
DROP TABLE runs;
DROP TABLE agents;
