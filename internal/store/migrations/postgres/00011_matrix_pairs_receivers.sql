-- The matrix's receivers by index, so the nodes of the kept coverage are
-- found by skipping from one node to the next (senders along the primary
-- key, receivers along this), not by reading a row a measurement.

-- +goose Up
CREATE INDEX matrix_pairs_dst ON matrix_pairs (dst_node);

-- +goose Down
DROP INDEX matrix_pairs_dst;
