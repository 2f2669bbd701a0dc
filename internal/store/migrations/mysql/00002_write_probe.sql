-- One row that /readyz rewrites (Store.CheckWrite): a real write, so that
-- readiness fails when the database can no longer write (disk full,
-- read-only server, lost primary), not only when it cannot be read.

-- +goose Up
CREATE TABLE write_probe (
    id     INT NOT NULL PRIMARY KEY CHECK (id = 1),
    toggle INT NOT NULL
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE write_probe;
