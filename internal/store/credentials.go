package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Credential is an agent's own credential (outside Kubernetes): the hash of
// a secret the server gave the agent when it joined, bound to its pod UID.
// The secret itself is never stored.
type Credential struct {
	PodUID    string
	Hash      string // hex SHA-256 of the secret
	CreatedAt time.Time
	// RevokedAt is when the credential was revoked: it no longer
	// authenticates, and its pod uid cannot join again until forgotten.
	RevokedAt *time.Time
}

const credentialCols = "pod_uid, token_hash, created_at, revoked_at"

func scanCredential(r rowScanner) (Credential, error) {
	var c Credential
	var created, revoked tsScan
	err := r.Scan(&c.PodUID, &c.Hash, &created, &revoked)
	c.CreatedAt, c.RevokedAt = created.t, revoked.ptr()
	return c, err
}

func (s *sqlStore) CreateCredential(ctx context.Context, c Credential, now time.Time) (Credential, error) {
	if c.PodUID == "" || c.Hash == "" {
		return Credential{}, fmt.Errorf("create credential: %w: pod_uid and hash are required", ErrInvalid)
	}
	c.CreatedAt = micro(now)
	_, err := s.w.ExecContext(ctx, s.d.rebind("INSERT INTO agent_credentials (pod_uid, token_hash, created_at) VALUES (?, ?, ?)"),
		c.PodUID, c.Hash, s.d.timeArg(c.CreatedAt))
	if err != nil {
		if s.d.isUnique(err) {
			return Credential{}, fmt.Errorf("create credential of %s: %w: the agent holds a credential", c.PodUID, ErrConflict)
		}
		return Credential{}, fmt.Errorf("create credential of %s: %w", c.PodUID, err)
	}
	return c, nil
}

func (s *sqlStore) CredentialByHash(ctx context.Context, hash string) (Credential, error) {
	c, err := scanCredential(s.r.QueryRowContext(ctx, s.d.rebind("SELECT "+credentialCols+" FROM agent_credentials WHERE token_hash = ? AND revoked_at IS NULL"), hash))
	if errors.Is(err, sql.ErrNoRows) {
		return Credential{}, fmt.Errorf("credential: %w", ErrNotFound)
	}
	if err != nil {
		return Credential{}, fmt.Errorf("look up credential: %w", err)
	}
	return c, nil
}

func (s *sqlStore) GetCredential(ctx context.Context, podUID string) (Credential, error) {
	c, err := scanCredential(s.r.QueryRowContext(ctx, s.d.rebind("SELECT "+credentialCols+" FROM agent_credentials WHERE pod_uid = ?"), podUID))
	if errors.Is(err, sql.ErrNoRows) {
		return Credential{}, fmt.Errorf("credential of %s: %w", podUID, ErrNotFound)
	}
	if err != nil {
		return Credential{}, fmt.Errorf("look up credential of %s: %w", podUID, err)
	}
	return c, nil
}

func (s *sqlStore) RevokeCredential(ctx context.Context, podUID string, now time.Time) (Credential, error) {
	var out Credential
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c, err := scanCredential(tx.QueryRowContext(ctx, s.d.rebind("SELECT "+credentialCols+" FROM agent_credentials WHERE pod_uid = ?"+s.d.forUpdate()), podUID))
		if errors.Is(err, sql.ErrNoRows) || err == nil && c.RevokedAt != nil {
			return fmt.Errorf("revoke credential of %s: %w: the agent holds no live credential", podUID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("revoke credential of %s: %w", podUID, err)
		}
		t := micro(now)
		if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE agent_credentials SET revoked_at = ? WHERE pod_uid = ?"), s.d.timeArg(t), podUID); err != nil {
			return fmt.Errorf("revoke credential of %s: %w", podUID, err)
		}
		c.RevokedAt = &t
		out = c
		return nil
	})
	return out, err
}

func (s *sqlStore) ForgetCredential(ctx context.Context, podUID string) error {
	res, err := s.w.ExecContext(ctx, s.d.rebind("DELETE FROM agent_credentials WHERE pod_uid = ?"), podUID)
	if err != nil {
		return fmt.Errorf("forget credential of %s: %w", podUID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("forget credential of %s: %w", podUID, ErrNotFound)
	}
	return nil
}
