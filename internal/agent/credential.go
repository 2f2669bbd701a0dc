package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

// CredentialFile is the file in the agent's state directory that holds its
// own credential: one line, mode 0600.
const CredentialFile = "token"

// Credential returns the agent's own credential (outside Kubernetes): the
// one kept in stateDir/token, or, when there is none yet, a new one that
// joinClient (holding the join token) asks the server for, written there
// before it is returned. So an agent joins once and keeps its credential
// across restarts; the server never issues a second one for the same
// pod uid unless the first is revoked.
func Credential(ctx context.Context, joinClient *client.Client, stateDir, podUID string) (tok string, joined bool, err error) {
	if stateDir == "" {
		return "", false, errors.New("agent credential: no state directory (--state-dir or CNPERF_STATE_DIR)")
	}
	path := filepath.Join(stateDir, CredentialFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok = strings.TrimSpace(string(b))
		if !strings.HasPrefix(tok, api.CredentialPrefix) || strings.ContainsAny(tok, " \t\n") {
			return "", false, fmt.Errorf("agent credential %s: not a cnperf agent credential (remove the file to join again)", path)
		}
		return tok, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("agent credential: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", false, fmt.Errorf("agent state directory: %w", err)
	}
	jr, err := joinClient.Join(ctx, podUID)
	if err != nil {
		return "", false, fmt.Errorf("join the server as %s: %w", podUID, err)
	}
	if err := writeSecret(path, jr.Token+"\n"); err != nil {
		return "", false, fmt.Errorf("agent credential: %w (the server issued it: `cnperf agents revoke %s` and `cnperf agents forget %s` before joining again)", err, podUID, podUID)
	}
	return jr.Token, true, nil
}

// writeSecret writes data to path with mode 0600, through a temporary file
// renamed into place, so a crash leaves the old file or the new one.
func writeSecret(path, data string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
