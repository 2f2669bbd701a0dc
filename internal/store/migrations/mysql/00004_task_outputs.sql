-- Raw tool output lives apart from the typed result (issue 11 part 4): a
-- task row stays small, so listings and run answers never carry outputs
-- of megabytes; GET /api/v2/tasks/{id}/raw reads one output on its own.
-- raw_size keeps the output's length in bytes on the task row. (00004:
-- 00003 is the agent credentials' migration.)

-- +goose Up
CREATE TABLE task_outputs (
    task_id VARCHAR(255) NOT NULL PRIMARY KEY,
    raw     LONGTEXT     NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
ALTER TABLE tasks ADD COLUMN raw_size BIGINT NOT NULL DEFAULT 0;
INSERT INTO task_outputs (task_id, raw) SELECT task_id, raw_result FROM tasks WHERE raw_result <> '';
UPDATE tasks SET raw_size = LENGTH(raw_result), raw_result = '' WHERE raw_result <> '';

-- +goose Down
UPDATE tasks t LEFT JOIN task_outputs o ON o.task_id = t.task_id SET t.raw_result = COALESCE(o.raw, '');
ALTER TABLE tasks DROP COLUMN raw_size;
DROP TABLE task_outputs;
