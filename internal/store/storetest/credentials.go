package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testCredentials: one credential per agent, found by its hash, refused a
// second time; once revoked it no longer authenticates and its uid cannot
// get a new one; once forgotten the uid may join afresh.
func testCredentials(t *testing.T, st store.Store) {
	ctx := context.Background()
	a := store.Credential{PodUID: "cred-a", Hash: "aa01"}
	got, err := st.CreateCredential(ctx, a, at(1))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !got.CreatedAt.Equal(at(1)) {
		t.Errorf("created at %v, want %v", got.CreatedAt, at(1))
	}
	steps := []struct {
		name string
		err  error
		want error
	}{
		{"second credential for the uid", second(st.CreateCredential(ctx, store.Credential{PodUID: "cred-a", Hash: "aa02"}, at(2))), store.ErrConflict},
		{"hash taken by another uid", second(st.CreateCredential(ctx, store.Credential{PodUID: "cred-b", Hash: "aa01"}, at(2))), store.ErrConflict},
		{"empty hash", second(st.CreateCredential(ctx, store.Credential{PodUID: "cred-b"}, at(2))), store.ErrInvalid},
		{"unknown hash", second(st.CredentialByHash(ctx, "ffff")), store.ErrNotFound},
		{"revoke unknown uid", second(st.RevokeCredential(ctx, "cred-none", at(2))), store.ErrNotFound},
		{"forget unknown uid", st.ForgetCredential(ctx, "cred-none"), store.ErrNotFound},
	}
	for _, s := range steps {
		if !errors.Is(s.err, s.want) {
			t.Errorf("%s: err %v, want %v", s.name, s.err, s.want)
		}
	}
	if c, err := st.CredentialByHash(ctx, "aa01"); err != nil || c.PodUID != "cred-a" {
		t.Fatalf("by hash: %+v, %v; want cred-a", c, err)
	}
	if c, err := st.GetCredential(ctx, "cred-a"); err != nil || c.Hash != "aa01" {
		t.Fatalf("by uid: %+v, %v; want hash aa01", c, err)
	}
	if c, err := st.RevokeCredential(ctx, "cred-a", at(3)); err != nil || c.Hash != "aa01" || c.RevokedAt == nil || !c.RevokedAt.Equal(at(3)) {
		t.Fatalf("revoke: %+v, %v; want aa01 revoked at %v", c, err, at(3))
	}
	if _, err := st.CredentialByHash(ctx, "aa01"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("by hash after revoke: %v, want not found", err)
	}
	if c, err := st.GetCredential(ctx, "cred-a"); err != nil || c.RevokedAt == nil {
		t.Fatalf("by uid after revoke: %+v, %v; want the revoked credential", c, err)
	}
	if _, err := st.RevokeCredential(ctx, "cred-a", at(4)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke twice: %v, want not found", err)
	}
	if _, err := st.CreateCredential(ctx, store.Credential{PodUID: "cred-a", Hash: "aa03"}, at(4)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("new credential for a revoked uid: %v, want conflict", err)
	}
	if err := st.ForgetCredential(ctx, "cred-a"); err != nil {
		t.Fatalf("forget: %v", err)
	}
	if _, err := st.CreateCredential(ctx, store.Credential{PodUID: "cred-a", Hash: "aa03"}, at(5)); err != nil {
		t.Fatalf("new credential after forget: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }
