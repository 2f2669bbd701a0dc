package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sqliteWithoutReturning is SQLite as a database without RETURNING would
// use it (MySQL 8; MariaDB for UPDATE): new keys from LastInsertId,
// upserted rows read back by key, updated rows locked, updated by key and
// read back. It lets the conformance suite cover that path on SQLite.
type sqliteWithoutReturning struct{ sqliteDialect }

func (sqliteWithoutReturning) returning() bool { return false }

// OpenSQLiteWithoutReturning opens the SQLite database at path (created
// and migrated if new) with the sqliteWithoutReturning dialect, on one
// connection.
func OpenSQLiteWithoutReturning(ctx context.Context, path string) (Store, error) {
	db, err := sql.Open("sqlite", path+"?"+sqliteWriter)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	d := sqliteWithoutReturning{}
	if err := migrate(ctx, db, d); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return newSQLStore(d, db, db), nil
}
