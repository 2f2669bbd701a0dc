package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// migrations holds one directory of goose SQL migrations per dialect.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// migrate applies the embedded migrations of the dialect ("sqlite" or
// "postgres") that db has not seen yet. On PostgreSQL a session advisory
// lock keeps two servers starting at once from migrating together.
func migrate(ctx context.Context, db *sql.DB, dialectName string) error {
	fsys, err := fs.Sub(migrations, "migrations/"+dialectName)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", dialectName, err)
	}
	var gd goose.Dialect
	var opts []goose.ProviderOption
	switch dialectName {
	case "sqlite":
		gd = goose.DialectSQLite3
	case "postgres":
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	default:
		return fmt.Errorf("migrations: unknown dialect %q", dialectName)
	}
	p, err := goose.NewProvider(gd, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", dialectName, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s schema: %w", dialectName, err)
	}
	return nil
}
