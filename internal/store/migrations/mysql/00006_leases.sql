-- Leader leases: a once-per-cluster background job (the reaper) runs only
-- in the replica that holds its lease; the holder renews it before
-- expires_at, another replica takes it over after.

-- +goose Up
CREATE TABLE leases (
    name       VARCHAR(255) NOT NULL PRIMARY KEY,
    holder     VARCHAR(255) NOT NULL,
    expires_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE leases;
