package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A SQLite store has one writer process. Two servers on one file used to
// both start and say ready, and tasks created through one were never
// dispatched by the other (each keeps its dispatch state in memory and
// learns of new tasks only from its own API). So the store holds an
// exclusive flock on PATH.lock while open and writes its pid there; a
// second opener is refused with the holder's pid. Replicas that share a
// store coordinate through PostgreSQL (leases, notifications).

// ErrLocked is returned (wrapped) when another process holds the store.
var ErrLocked = errors.New("store is in use by another process")

// fileLock is a held flock; release is idempotent.
type fileLock struct {
	once sync.Once
	f    *os.File
}

// lockSQLite takes the exclusive lock of the SQLite database at path.
func lockSQLite(path string) (*fileLock, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock sqlite %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "unknown pid"
		if b, rerr := os.ReadFile(name); rerr == nil && strings.TrimSpace(string(b)) != "" {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("open sqlite %s: %w (%s holds %s): a SQLite store serves one server; stop it, or run replicas on PostgreSQL", path, ErrLocked, holder, name)
		}
		return nil, fmt.Errorf("lock sqlite %s: flock %s: %w", path, name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &fileLock{f: f}, nil
}

// release drops the lock (closing the file releases the flock). The file
// stays: removing it could race with the next opener's lock.
func (l *fileLock) release() error {
	if l == nil {
		return nil
	}
	var err error
	l.once.Do(func() { err = l.f.Close() })
	return err
}
