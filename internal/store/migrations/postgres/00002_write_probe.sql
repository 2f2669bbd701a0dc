-- One row that /readyz rewrites (Store.CheckWrite): a real write, so that
-- readiness fails when the database can no longer write (disk full,
-- read-only file system, lost primary), not only when it cannot be read.

-- +goose Up
CREATE TABLE write_probe (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    toggle INTEGER NOT NULL
);

-- +goose Down
DROP TABLE write_probe;
