package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Lease is the state of a named leader lease after a call to HoldLease.
type Lease struct {
	Name    string
	Holder  string    // who holds it now (the caller, or another replica)
	Expires time.Time // when the holder's hold ends unless renewed
	Held    bool      // the caller holds it
}

// HoldLease takes or renews the lease name for holder until now+ttl: it
// succeeds when nobody holds it, holder already does, or the current
// hold expired at or before now. Otherwise it changes nothing and reports
// the current holder. The row is read FOR UPDATE and written in one
// transaction, so two replicas racing for an expired lease cannot both
// win; a first insert that loses the race to another replica's insert is
// a plain "not held".
func (s *sqlStore) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (Lease, error) {
	if name == "" || holder == "" {
		return Lease{}, fmt.Errorf("hold lease: %w: name and holder are required", ErrInvalid)
	}
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("hold lease %s: %w: ttl %s is not positive", name, ErrInvalid, ttl)
	}
	now = micro(now)
	want := Lease{Name: name, Holder: holder, Expires: now.Add(ttl), Held: true}
	var got Lease
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var cur string
		var exp tsScan
		err := tx.QueryRowContext(ctx, s.d.rebind("SELECT holder, expires_at FROM leases WHERE name = ?"+s.d.forUpdate()), name).Scan(&cur, &exp)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, s.d.rebind("INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"),
				name, holder, s.d.timeArg(want.Expires)); err != nil {
				return err
			}
			got = want
			return nil
		case err != nil:
			return err
		case cur != holder && exp.t.After(now):
			got = Lease{Name: name, Holder: cur, Expires: exp.t}
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE leases SET holder = ?, expires_at = ? WHERE name = ?"),
			holder, s.d.timeArg(want.Expires), name); err != nil {
			return err
		}
		got = want
		return nil
	})
	if err != nil {
		if s.d.isUnique(err) {
			return s.readLease(ctx, name)
		}
		return Lease{}, fmt.Errorf("hold lease %s for %s: %w", name, holder, err)
	}
	return got, nil
}

// readLease reports who holds name (after losing an insert race).
func (s *sqlStore) readLease(ctx context.Context, name string) (Lease, error) {
	l := Lease{Name: name}
	var exp tsScan
	if err := s.r.QueryRowContext(ctx, s.d.rebind("SELECT holder, expires_at FROM leases WHERE name = ?"), name).Scan(&l.Holder, &exp); err != nil {
		return Lease{}, fmt.Errorf("read lease %s: %w", name, err)
	}
	l.Expires = exp.t
	return l, nil
}

// ReleaseLease gives up holder's hold of name (a replica shutting down
// cleanly), so another replica takes it at its next try instead of after
// the expiry. Releasing a lease one does not hold changes nothing.
func (s *sqlStore) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.w.ExecContext(ctx, s.d.rebind("DELETE FROM leases WHERE name = ? AND holder = ?"), name, holder); err != nil {
		return fmt.Errorf("release lease %s of %s: %w", name, holder, err)
	}
	return nil
}

func (s *sqlStore) DropExpiredLeases(ctx context.Context, prefix string, before time.Time) (int, error) {
	if prefix == "" || strings.ContainsAny(prefix, "%_\\") {
		return 0, fmt.Errorf("drop expired leases: %w: prefix %q is empty or holds a LIKE wildcard", ErrInvalid, prefix)
	}
	res, err := s.w.ExecContext(ctx, s.d.rebind("DELETE FROM leases WHERE name LIKE ? AND expires_at < ?"), prefix+"%", s.d.timeArg(before))
	if err != nil {
		return 0, fmt.Errorf("drop expired leases %s*: %w", prefix, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
