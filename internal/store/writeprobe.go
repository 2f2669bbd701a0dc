package store

import (
	"context"
	"fmt"
)

// writeProbe rewrites the one row of write_probe (flipping its toggle),
// written once for every dialect that accepts ON CONFLICT … DO UPDATE.
const writeProbe = `INSERT INTO write_probe (id, toggle) VALUES (1, 0)
ON CONFLICT (id) DO UPDATE SET toggle = 1 - write_probe.toggle`

// CheckWrite makes one small real write (see Store.CheckWrite).
func (s *sqlStore) CheckWrite(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, writeProbe); err != nil {
		return fmt.Errorf("write probe: %w", err)
	}
	return nil
}
