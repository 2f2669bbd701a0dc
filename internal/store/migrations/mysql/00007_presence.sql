-- Presence leases: an agent holding a session on a replica names that
-- replica's presence lease (a row of leases, "presence REPLICA"), written
-- when the session opens and cleared when it ends; MarkSilentOffline leaves
-- such an agent online while the lease is alive, so the replicas do not
-- rewrite every held agent's last_heartbeat every few seconds.
-- (docs/control-plane.md, "Server CPU per agent".) '' names no lease.

-- +goose Up
ALTER TABLE agents ADD COLUMN presence_lease VARCHAR(255) NOT NULL DEFAULT '';
-- MarkSilentOffline reads the lease of every online agent with an old
-- time (a held agent keeps the time of its hold) from the index alone.
ALTER TABLE agents DROP INDEX agents_status_heartbeat, ADD INDEX agents_status_heartbeat (status, last_heartbeat, presence_lease);

-- +goose Down
ALTER TABLE agents DROP INDEX agents_status_heartbeat, ADD INDEX agents_status_heartbeat (status, last_heartbeat);
ALTER TABLE agents DROP COLUMN presence_lease;
