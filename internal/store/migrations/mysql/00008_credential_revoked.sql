-- A revoked credential is kept, marked revoked_at, so that the join token
-- cannot join its pod uid again; forgetting the uid (an admin's
-- ForgetCredential) deletes the row and lets the uid join afresh.

-- +goose Up
ALTER TABLE agent_credentials ADD COLUMN revoked_at DATETIME(6) NULL;

-- +goose Down
ALTER TABLE agent_credentials DROP COLUMN revoked_at;
