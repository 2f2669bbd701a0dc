-- The matrix's coverage: per ordered node pair and measurement (tcp,
-- udp, rr, ping), when it was last measured, by which run, and its last
-- figures (JSON), so `cnperf matrix coverage` can show every pair's age
-- whatever plan measured it.

-- +goose Up
CREATE TABLE matrix_pairs (
    src_node    TEXT        NOT NULL,
    dst_node    TEXT        NOT NULL,
    measure     TEXT        NOT NULL,
    run_id      TEXT        NOT NULL,
    measured_at TIMESTAMPTZ NOT NULL,
    figures     TEXT        NOT NULL,
    PRIMARY KEY (src_node, dst_node, measure)
);

-- +goose Down
DROP TABLE matrix_pairs;
