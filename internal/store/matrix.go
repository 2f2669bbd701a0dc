package store

import (
	"context"
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
	at := s.d.timeArg(micro(p.MeasuredAt))
	// An older result (a late report) must not replace a newer one: the
	// row is only written when it is new or not later than p.
	if _, err := s.w.ExecContext(ctx, s.d.rebind("DELETE FROM matrix_pairs WHERE src_node = ? AND dst_node = ? AND measure = ? AND measured_at <= ?"),
		p.Src, p.Dst, p.Measure, at); err != nil {
		return fmt.Errorf("record matrix pair %s → %s: %w", p.Src, p.Dst, err)
	}
	q := s.d.rebind("INSERT INTO matrix_pairs (src_node, dst_node, measure, run_id, measured_at, figures) VALUES (?, ?, ?, ?, ?, ?)")
	if _, err := s.w.ExecContext(ctx, q, p.Src, p.Dst, p.Measure, p.RunID, at, p.Figures); err != nil {
		if s.d.isUnique(err) {
			return nil // a later measurement is kept
		}
		return fmt.Errorf("record matrix pair %s → %s: %w", p.Src, p.Dst, err)
	}
	return nil
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
