-- Raw tool output lives apart from the typed result (issue 11 part 4): a
-- task row stays small, so listings and run answers never carry outputs
-- of megabytes; GET /api/v2/tasks/{id}/raw reads one output on its own.
-- raw_size keeps the output's length in bytes on the task row. (00004:
-- 00003 is the agent credentials' migration.)

-- +goose Up
CREATE TABLE task_outputs (
    task_id TEXT PRIMARY KEY,
    raw     TEXT NOT NULL
);
ALTER TABLE tasks ADD COLUMN raw_size INTEGER NOT NULL DEFAULT 0;
INSERT INTO task_outputs (task_id, raw) SELECT task_id, raw_result FROM tasks WHERE raw_result <> '';
UPDATE tasks SET raw_size = LENGTH(CAST(raw_result AS BLOB)), raw_result = '' WHERE raw_result <> '';

-- +goose Down
UPDATE tasks SET raw_result = COALESCE((SELECT raw FROM task_outputs o WHERE o.task_id = tasks.task_id), '');
ALTER TABLE tasks DROP COLUMN raw_size;
DROP TABLE task_outputs;
