package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// migrations holds one directory of goose SQL migrations per dialect.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql migrations/mysql/*.sql
var migrations embed.FS

// migrate applies the embedded migrations of dialect d (the directory
// migrations/d.name()) that db has not seen yet, under the dialect's
// session lock when it has one (PostgreSQL: an advisory lock, so two
// servers starting at once do not migrate together).
func migrate(ctx context.Context, db *sql.DB, d dialect) error {
	fsys, err := fs.Sub(migrations, "migrations/"+d.name())
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", d.name(), err)
	}
	gd, locker, err := d.migrations()
	if err != nil {
		return fmt.Errorf("migration lock for %s: %w", d.name(), err)
	}
	// Out of order: migrations are numbered by whoever writes them, and one
	// numbered lower may land after a higher one was applied somewhere.
	opts := []goose.ProviderOption{goose.WithAllowOutofOrder(true)}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(gd, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", d.name(), err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s schema: %w", d.name(), err)
	}
	return nil
}
