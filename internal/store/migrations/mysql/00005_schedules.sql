-- Schedules (issue 13 part 3): a suite the server runs by itself every
-- every_ns, next due at next_at; schedule_runs keeps every time one came
-- due (run, skipped because the previous one was still going, or failed),
-- with the ids of the runs it made (a JSON array) and a summary of its
-- rows and SLO verdict (JSON) for /metrics and the dashboard. beat_at is
-- refreshed by the server running it, so a run whose server died is found.

-- +goose Up
CREATE TABLE schedules (
    id         VARCHAR(64)  NOT NULL PRIMARY KEY,
    suite      VARCHAR(255) NOT NULL,
    every_ns   BIGINT       NOT NULL,
    options    LONGTEXT     NOT NULL,
    slo        LONGTEXT,
    next_at    DATETIME(6)  NOT NULL,
    created_at DATETIME(6)  NOT NULL,
    updated_at DATETIME(6)  NOT NULL,
    INDEX schedules_next (next_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE schedule_runs (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    schedule_id VARCHAR(64)  NOT NULL,
    state       VARCHAR(16)  NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'skipped')),
    reason      TEXT         NOT NULL,
    due_at      DATETIME(6)  NOT NULL,
    started_at  DATETIME(6)  NOT NULL,
    beat_at     DATETIME(6)  NOT NULL,
    finished_at DATETIME(6),
    run_ids     LONGTEXT     NOT NULL,
    summary     LONGTEXT,
    INDEX schedule_runs_schedule (schedule_id, id),
    INDEX schedule_runs_state (state, beat_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE schedule_runs;
DROP TABLE schedules;
