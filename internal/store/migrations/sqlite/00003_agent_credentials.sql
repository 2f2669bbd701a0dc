-- Per-agent credentials (outside Kubernetes): an agent that joined with
-- the join token gets a secret of its own, bound to its pod uid. Only the
-- SHA-256 of the secret is kept.

-- +goose Up
CREATE TABLE agent_credentials (
    pod_uid    TEXT    NOT NULL PRIMARY KEY,
    token_hash TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE agent_credentials;
