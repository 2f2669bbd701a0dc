-- Schedules (issue 13 part 3): a suite the server runs by itself every
-- every_ns, next due at next_at; schedule_runs keeps every time one came
-- due (run, skipped because the previous one was still going, or failed),
-- with the ids of the runs it made (a JSON array) and a summary of its
-- rows and SLO verdict (JSON) for /metrics and the dashboard. beat_at is
-- refreshed by the server running it, so a run whose server died is found.

-- +goose Up
CREATE TABLE schedules (
    id         TEXT    NOT NULL PRIMARY KEY,
    suite      TEXT    NOT NULL,
    every_ns   INTEGER NOT NULL,
    options    TEXT    NOT NULL,
    slo        TEXT,
    next_at    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX schedules_next ON schedules (next_at);

CREATE TABLE schedule_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'skipped')),
    reason      TEXT    NOT NULL,
    due_at      INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    beat_at     INTEGER NOT NULL,
    finished_at INTEGER,
    run_ids     TEXT    NOT NULL,
    summary     TEXT
);
CREATE INDEX schedule_runs_schedule ON schedule_runs (schedule_id, id);
CREATE INDEX schedule_runs_state ON schedule_runs (state, beat_at);

-- +goose Down
DROP TABLE schedule_runs;
DROP TABLE schedules;
