package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// MatrixPair is what the store keeps of one measurement of an ordered
// node pair by the matrix: when it was last made, by which run, and its
// figures (JSON, opaque to the store).
type MatrixPair struct {
	Src, Dst   string // node names
	Measure    string // tcp, udp, rr, ping
	RunID      string
	MeasuredAt time.Time
	Figures    string
}

// Node names are Kubernetes node names (at most 253 bytes); a measure
// name is short.
const (
	maxNodeName    = 253
	maxMeasureName = 16
)

// RecordMatrixPair keeps p as the pair's latest measurement of its kind,
// unless the store holds a later one.
func (s *sqlStore) RecordMatrixPair(ctx context.Context, p MatrixPair) error {
	if p.Src == "" || p.Dst == "" || p.Measure == "" || len(p.Src) > maxNodeName || len(p.Dst) > maxNodeName || len(p.Measure) > maxMeasureName {
		return fmt.Errorf("record matrix pair %q → %q (%q): %w: node names of 1-%d bytes and a measure of 1-%d are required", p.Src, p.Dst, p.Measure, ErrInvalid, maxNodeName, maxMeasureName)
	}
	if p.Figures == "" {
		p.Figures = "{}"
	}
	stmt, err := s.recordPairStmt(ctx)
	if err != nil {
		return fmt.Errorf("record matrix pair %s → %s: %w", p.Src, p.Dst, err)
	}
	if _, err := stmt.ExecContext(ctx, p.Src, p.Dst, p.Measure, p.RunID, s.d.timeArg(micro(p.MeasuredAt)), p.Figures); err != nil {
		return fmt.Errorf("record matrix pair %s → %s: %w", p.Src, p.Dst, err)
	}
	return nil
}

// recordPairStmt is recordPairSQL prepared, once: a statement parsed
// for each result costs more than the write.
func (s *sqlStore) recordPairStmt(ctx context.Context) (*sql.Stmt, error) {
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	if s.recordPair == nil {
		st, err := s.w.PrepareContext(ctx, s.recordPairSQL)
		if err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		s.recordPair = st
	}
	return s.recordPair, nil
}

// recordPairSQL is RecordMatrixPair's one statement: an upsert that
// leaves a later measurement in place, so an older result (a late
// report) does not replace it. One statement and one commit a result: a
// matrix of a thousand nodes reports tens of thousands a cycle.
func recordPairSQL(d dialect) string {
	const insert = "INSERT INTO matrix_pairs (src_node, dst_node, measure, run_id, measured_at, figures) VALUES (?, ?, ?, ?, ?, ?)"
	if d.name() == "mysql" {
		// Assignments run left to right, so measured_at goes last.
		newer := "measured_at <= VALUES(measured_at)"
		return insert + " ON DUPLICATE KEY UPDATE run_id = IF(" + newer + ", VALUES(run_id), run_id), figures = IF(" + newer +
			", VALUES(figures), figures), measured_at = IF(" + newer + ", VALUES(measured_at), measured_at)"
	}
	return d.rebind(insert + " ON CONFLICT (src_node, dst_node, measure) DO UPDATE SET run_id = excluded.run_id, measured_at = excluded.measured_at," +
		" figures = excluded.figures WHERE matrix_pairs.measured_at <= excluded.measured_at")
}

// MaxMatrixSenders bounds the sending nodes one ListMatrixPairs call
// reads: its answer is one page of the coverage, never the whole N².
const MaxMatrixSenders = 500

// ListMatrixPairs returns the kept measurements of the pairs sent from
// srcs (1 to MaxMatrixSenders node names), by source, destination and
// measure.
func (s *sqlStore) ListMatrixPairs(ctx context.Context, srcs []string) ([]MatrixPair, error) {
	if len(srcs) == 0 || len(srcs) > MaxMatrixSenders {
		return nil, fmt.Errorf("list matrix pairs: %w: %d sending nodes, want 1 to %d", ErrInvalid, len(srcs), MaxMatrixSenders)
	}
	args := make([]any, len(srcs))
	for i, n := range srcs {
		args[i] = n
	}
	q := "SELECT src_node, dst_node, measure, run_id, measured_at, figures FROM matrix_pairs WHERE src_node IN (?" +
		strings.Repeat(", ?", len(srcs)-1) + ") ORDER BY src_node, dst_node, measure"
	rows, err := s.r.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list matrix pairs: %w", err)
	}
	out, err := collect(rows, func(r rowScanner) (MatrixPair, error) {
		var p MatrixPair
		var at tsScan
		err := r.Scan(&p.Src, &p.Dst, &p.Measure, &p.RunID, &at, &p.Figures)
		p.MeasuredAt = at.t
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list matrix pairs: %w", err)
	}
	return out, nil
}

// MatrixNodes returns the nodes of the kept measurements, senders and
// receivers, in no set order. It skips from one node to the next along
// an index (the primary key's first column, matrix_pairs_dst), so it
// reads an index entry a node, not a row a measurement.
func (s *sqlStore) MatrixNodes(ctx context.Context) ([]string, error) {
	var out []string
	for _, col := range []string{"src_node", "dst_node"} {
		q := "WITH RECURSIVE s(n) AS (SELECT MIN(" + col + ") FROM matrix_pairs" +
			" UNION ALL SELECT (SELECT MIN(" + col + ") FROM matrix_pairs WHERE " + col + " > s.n) FROM s WHERE s.n IS NOT NULL)" +
			" SELECT n FROM s WHERE n IS NOT NULL"
		rows, err := s.r.QueryContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("matrix nodes: %w", err)
		}
		nodes, err := collect(rows, func(r rowScanner) (string, error) {
			var n string
			return n, r.Scan(&n)
		})
		if err != nil {
			return nil, fmt.Errorf("matrix nodes: %w", err)
		}
		out = append(out, nodes...)
	}
	return out, nil
}

// MatrixTally counts the kept ordered pairs: those measured, those whose
// oldest kind was measured before a time, and the oldest of them.
type MatrixTally struct {
	Pairs, Before int
	Oldest        *time.Time // nil: no pair kept
}

// TallyMatrixPairs counts the kept pairs in the database (one row of
// answer, whatever N), those measured before before among them (a pair
// is as old as its oldest kind).
func (s *sqlStore) TallyMatrixPairs(ctx context.Context, before time.Time) (MatrixTally, error) {
	q := s.d.rebind("SELECT COUNT(*), COALESCE(SUM(CASE WHEN m < ? THEN 1 ELSE 0 END), 0), MIN(m)" +
		" FROM (SELECT MIN(measured_at) AS m FROM matrix_pairs GROUP BY src_node, dst_node) t")
	var t MatrixTally
	var oldest tsScan
	if err := s.r.QueryRowContext(ctx, q, s.d.timeArg(micro(before))).Scan(&t.Pairs, &t.Before, &oldest); err != nil {
		return MatrixTally{}, fmt.Errorf("tally matrix pairs: %w", err)
	}
	t.Oldest = oldest.ptr()
	return t, nil
}
