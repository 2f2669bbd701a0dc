package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// stateVersion is written into every state file.
const stateVersion = 1

type stateFileJSON struct {
	Version int `json:"version"`
	*Lab
}

// create writes the state file exclusively, which claims the lab's name.
func (l *Lab) create() error {
	p := stateFile(l.stateDir, l.Name)
	data, err := json.MarshalIndent(stateFileJSON{Version: stateVersion, Lab: l}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("lab %q already exists (state file %s): run cnperf lab down --name %s, or pick another --name", l.Name, p, l.Name)
		}
		return fmt.Errorf("create state file: %w", err)
	}
	_, werr := f.Write(append(data, '\n'))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(p)
		return fmt.Errorf("write state file %s: %w", p, err)
	}
	return nil
}

// save replaces the state file atomically.
func (l *Lab) save() error {
	p := stateFile(l.stateDir, l.Name)
	data, err := json.MarshalIndent(stateFileJSON{Version: stateVersion, Lab: l}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replace state file: %w", err)
	}
	return nil
}

// load reads a state file; a missing one is ErrNotFound.
func load(path string) (*Lab, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	st := stateFileJSON{Lab: &Lab{}}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decode state %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("state %s: version %d, want %d", path, st.Version, stateVersion)
	}
	st.Lab.Config.StateDir = filepath.Dir(path)
	return st.Lab, nil
}

// withDirLock runs fn holding an exclusive flock on the state directory, so
// that processes updating the same state file do not lose each other's
// records.
func withDirLock(dir string, fn func() error) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state dir: %w", err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock state dir: %w", err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN) //nolint:errcheck // closing releases it too
	return fn()
}
