-- The labels of its node an agent reports (its zone labels, as JSON), for
-- the pair plans by zone on the server's own schedules.

-- +goose Up
ALTER TABLE agents ADD COLUMN node_labels VARCHAR(2048) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE agents DROP COLUMN node_labels;
