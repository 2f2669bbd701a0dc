-- When the agent acknowledged the end of a task the server had ended
-- (cancelled, or ended for its absence): its cancelled report, which it
-- sends once it has stopped the task and removed any QoS set-up. NULL
-- until then; stop_reason keeps the agent's reason (Complete).

-- +goose Up
ALTER TABLE tasks ADD COLUMN stopped_at DATETIME(6);
ALTER TABLE tasks ADD COLUMN stop_reason TEXT NOT NULL DEFAULT ('');

-- +goose Down
ALTER TABLE tasks DROP COLUMN stop_reason;
ALTER TABLE tasks DROP COLUMN stopped_at;
