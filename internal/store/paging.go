package store

import (
	"context"
	"fmt"
	"strings"
)

// where builds a WHERE clause: conditions with "?" placeholders, their
// arguments in order.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// normPage checks p and returns its limit (DefaultPageLimit for 0, at
// most MaxPageLimit).
func normPage(p Page) (int, error) {
	if p.Limit < 0 {
		return 0, fmt.Errorf("%w: page limit %d is negative", ErrInvalid, p.Limit)
	}
	if p.AfterID < 0 {
		return 0, fmt.Errorf("%w: page after_id %d is negative", ErrInvalid, p.AfterID)
	}
	switch {
	case p.Limit == 0:
		return DefaultPageLimit, nil
	case p.Limit > MaxPageLimit:
		return MaxPageLimit, nil
	}
	return p.Limit, nil
}

// listPage counts the rows of table that match w, then reads cols of the
// page of at most limit rows whose key is above afterID, in key order.
func listPage[T any](ctx context.Context, s *sqlStore, table, cols, key string, w where, afterID int64, limit int, scan func(rowScanner) (T, error)) ([]T, int, error) {
	var total int
	if err := s.r.QueryRowContext(ctx, s.d.rebind("SELECT COUNT(*) FROM "+table+w.sql()), w.args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count %s: %w", table, err)
	}
	w.add(key+" > ?", afterID)
	args := append(w.args, limit)
	rows, err := s.r.QueryContext(ctx, s.d.rebind("SELECT "+cols+" FROM "+table+w.sql()+" ORDER BY "+key+" LIMIT ?"), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", table, err)
	}
	page, err := collect(rows, scan)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", table, err)
	}
	return page, total, nil
}
