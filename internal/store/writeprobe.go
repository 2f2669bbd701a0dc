package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// ErrCannotWrite marks an error of a database that refuses writes: a full
// disk, a read-only file system or database, an I/O error. CheckWrite's
// errors carry it; CannotWrite also knows the drivers' own errors of that
// kind, which any write may return.
var ErrCannotWrite = errors.New("store cannot write")

// CannotWrite reports whether err says that the database cannot write (as
// opposed to a conflict, a bad argument or a caller that went away).
func CannotWrite(err error) bool {
	if errors.Is(err, ErrCannotWrite) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case 8, 10, 13: // SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100", "25006", "58030": // disk_full, read_only_sql_transaction, io_error
			return true
		}
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 3, 1021, 1114, 1290, 1792: // EE_WRITE, ER_DISK_FULL, ER_RECORD_FILE_FULL, ER_OPTION_PREVENTS_STATEMENT (read-only), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
			return true
		}
	}
	return false
}

// writeProbes counts write probes; the probe row alternates between 0 and
// 1 with it, so every probe changes the row.
var writeProbes atomic.Int64

// CheckWrite makes one small real write (see Store.CheckWrite): it
// upserts the single row of write_probe.
func (s *sqlStore) CheckWrite(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, s.writeProbeSQL, 1, writeProbes.Add(1)%2); err != nil {
		return fmt.Errorf("%w: write probe: %w", ErrCannotWrite, err)
	}
	return nil
}
