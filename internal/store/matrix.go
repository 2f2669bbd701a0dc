package store

import (
	"context"
	"database/sql"
	"fmt"
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

// ListMatrixPairs returns every kept pair measurement, by source,
// destination and measure.
func (s *sqlStore) ListMatrixPairs(ctx context.Context) ([]MatrixPair, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT src_node, dst_node, measure, run_id, measured_at, figures FROM matrix_pairs ORDER BY src_node, dst_node, measure")
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
