-- Schedules (issue 13 part 3): a suite the server runs by itself every
-- every_ns, next due at next_at; schedule_runs keeps every time one came
-- due (run, skipped because the previous one was still going, or failed),
-- with the ids of the runs it made (a JSON array) and a summary of its
-- rows and SLO verdict (JSON) for /metrics and the dashboard. beat_at is
-- refreshed by the server running it, so a run whose server died is found.

-- +goose Up
CREATE TABLE schedules (
    id         TEXT        NOT NULL PRIMARY KEY,
    suite      TEXT        NOT NULL,
    every_ns   BIGINT      NOT NULL,
    options    TEXT        NOT NULL,
    slo        TEXT,
    next_at    TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX schedules_next ON schedules (next_at);

CREATE TABLE schedule_runs (
    id          BIGSERIAL   PRIMARY KEY,
    schedule_id TEXT        NOT NULL,
    state       TEXT        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'skipped')),
    reason      TEXT        NOT NULL,
    due_at      TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    beat_at     TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    run_ids     TEXT        NOT NULL,
    summary     TEXT
);
CREATE INDEX schedule_runs_schedule ON schedule_runs (schedule_id, id);
CREATE INDEX schedule_runs_state ON schedule_runs (state, beat_at);

-- +goose Down
DROP TABLE schedule_runs;
DROP TABLE schedules;
