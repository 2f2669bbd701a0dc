-- Per-agent credentials (outside Kubernetes): an agent that joined with
-- the join token gets a secret of its own, bound to its pod uid. Only the
-- SHA-256 of the secret is kept.

-- +goose Up
CREATE TABLE agent_credentials (
    pod_uid    VARCHAR(255) NOT NULL PRIMARY KEY,
    token_hash VARCHAR(64)  NOT NULL UNIQUE,
    created_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE agent_credentials;
