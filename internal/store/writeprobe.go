package store

import (
	"context"
	"fmt"
	"sync/atomic"
)

// writeProbes counts write probes; the probe row alternates between 0 and
// 1 with it, so every probe changes the row.
var writeProbes atomic.Int64

// CheckWrite makes one small real write (see Store.CheckWrite): it
// upserts the single row of write_probe.
func (s *sqlStore) CheckWrite(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, s.writeProbeSQL, 1, writeProbes.Add(1)%2); err != nil {
		return fmt.Errorf("write probe: %w", err)
	}
	return nil
}
