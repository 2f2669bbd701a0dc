-- A result that arrives after the server ended its task for the agent's
-- absence ("agent went offline", "deadline passed") is stored (Complete),
-- and late_reason keeps why the task had first been ended; '' for a result
-- that came in time.

-- +goose Up
ALTER TABLE tasks ADD COLUMN late_reason TEXT NOT NULL DEFAULT ('');

-- +goose Down
ALTER TABLE tasks DROP COLUMN late_reason;
