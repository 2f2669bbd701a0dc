-- The matrix's coverage: per ordered node pair and measurement (tcp,
-- udp, rr, ping), when it was last measured, by which run, and its last
-- figures (JSON), so `cnperf matrix coverage` can show every pair's age
-- whatever plan measured it.

-- +goose Up
CREATE TABLE matrix_pairs (
    src_node    VARCHAR(253) NOT NULL,
    dst_node    VARCHAR(253) NOT NULL,
    measure     VARCHAR(16)  NOT NULL,
    run_id      VARCHAR(255) NOT NULL,
    measured_at DATETIME(6)  NOT NULL,
    figures     TEXT         NOT NULL,
    PRIMARY KEY (src_node, dst_node, measure)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE matrix_pairs;
