-- Leader leases: a once-per-cluster background job (the reaper) runs only
-- in the replica that holds its lease; the holder renews it before
-- expires_at, another replica takes it over after.

-- +goose Up
CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE leases;
