package store

import (
	"context"
	"fmt"
	"strings"
)

// Open connects to the database named by dsn, applies the embedded schema
// migrations and returns the Store:
//
//	sqlite:PATH                 SQLite file at PATH (created if missing)
//	postgres://... postgresql:// PostgreSQL (pgx DSN syntax)
//	mysql://USER@HOST/DB        MySQL 8 or MariaDB (see MySQLDriverDSN)
//
// Any other scheme is an error naming the accepted ones.
func Open(ctx context.Context, dsn string) (Store, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		return openMySQL(ctx, dsn)
	}
	scheme := dsn
	if i := strings.Index(dsn, ":"); i >= 0 {
		scheme = dsn[:i]
	}
	return nil, fmt.Errorf("open store: unknown DSN scheme %q: want sqlite:PATH, postgres://..., postgresql://... or mysql://...", scheme)
}
