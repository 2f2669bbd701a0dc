-- Initial schema (MySQL 8, MariaDB 10.6+). Times are DATETIME(6) in UTC;
-- durations BIGINT nanoseconds; booleans TINYINT(1); JSON as LONGTEXT (the
-- text is kept byte for byte). Keys and indexed columns are VARCHAR(255);
-- utf8mb4_bin compares them byte for byte, as SQLite and PostgreSQL do.

-- +goose Up
CREATE TABLE agents (
    id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    pod_uid        VARCHAR(255) NOT NULL UNIQUE,
    pod_name       TEXT         NOT NULL DEFAULT (''),
    pod_namespace  TEXT         NOT NULL DEFAULT (''),
    pod_ip         TEXT         NOT NULL DEFAULT (''),
    node_name      VARCHAR(255) NOT NULL DEFAULT '',
    node_ip        TEXT         NOT NULL DEFAULT (''),
    host_network   BOOLEAN      NOT NULL DEFAULT FALSE,
    responder_addr TEXT         NOT NULL DEFAULT (''),
    version        TEXT         NOT NULL DEFAULT (''),
    status         SMALLINT     NOT NULL CHECK (status IN (1, 2, 3)),
    register_time  DATETIME(6)  NOT NULL,
    last_heartbeat DATETIME(6)  NOT NULL,
    -- MarkSilentOffline, ListAgents.
    INDEX agents_status_heartbeat (status, last_heartbeat),
    INDEX agents_node (node_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE runs (
    seq               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id                VARCHAR(255) NOT NULL UNIQUE,
    suite             VARCHAR(255) NOT NULL,
    params            LONGTEXT,
    state             VARCHAR(16)  NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    allow_concurrency BOOLEAN      NOT NULL DEFAULT FALSE,
    created_at        DATETIME(6)  NOT NULL,
    updated_at        DATETIME(6)  NOT NULL,
    finished_at       DATETIME(6),
    INDEX runs_state (state, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE tasks (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id       VARCHAR(255) NOT NULL UNIQUE,
    run_id        VARCHAR(255),
    src_pod_uid   VARCHAR(255) NOT NULL,
    src_pod_ip    TEXT         NOT NULL DEFAULT (''),
    dst_pod_uid   VARCHAR(255) NOT NULL,
    dst_pod_ip    TEXT         NOT NULL DEFAULT (''),
    type          VARCHAR(255) NOT NULL,
    param         TEXT         NOT NULL DEFAULT (''),
    spec          LONGTEXT,
    state         VARCHAR(16)  NOT NULL CHECK (state IN ('pending', 'dispatched', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled')),
    reason        TEXT         NOT NULL DEFAULT (''),
    raw_result    LONGTEXT     NOT NULL DEFAULT (''),
    result        LONGTEXT,
    exclusive     BOOLEAN      NOT NULL DEFAULT FALSE,
    timeout_ns    BIGINT       NOT NULL DEFAULT 0,
    deadline      DATETIME(6),
    created_at    DATETIME(6)  NOT NULL,
    dispatched_at DATETIME(6),
    started_at    DATETIME(6),
    finished_at   DATETIME(6),
    updated_at    DATETIME(6)  NOT NULL,
    report_id     TEXT         NOT NULL DEFAULT (''),
    FOREIGN KEY (run_id) REFERENCES runs (id),
    -- ClaimTasks (pending tasks of one source), FailAgentTasks, ListTasks by agent.
    INDEX tasks_src_state (src_pod_uid, state, id),
    INDEX tasks_dst_state (dst_pod_uid, state, id),
    -- ExpireDeadlines, the exclusive-node check, ListTasks by state.
    INDEX tasks_state_deadline (state, deadline),
    -- Run counts, run completion, ListTasks by run.
    INDEX tasks_run_state (run_id, state),
    INDEX tasks_type (type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- ClaimTasks locks this one row (SELECT ... FOR UPDATE) so that claims
-- from every server on the database run one at a time.
CREATE TABLE claim_lock (
    id INT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT INTO claim_lock (id) VALUES (1);

-- +goose Down
DROP TABLE claim_lock;
DROP TABLE tasks;
DROP TABLE runs;
DROP TABLE agents;
