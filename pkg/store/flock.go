package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// RunnerFile is the conntrack clean-up's runner lock: whoever holds an
// exclusive flock on it drains the ConntrackFile queue (package forget's
// runner.go says how it is handed on).
const RunnerFile File = "conntrack.run"

// TryFlock opens f in the device's state directory, under the state lock
// (Lock), never through a symlink, making it if missing, and takes an
// exclusive flock on it without waiting. nil and no error: another open
// file holds it. The file outlives Unlock, and so does its flock, until
// it is closed (or its process, and every child it went to, is gone).
func (s *Store) TryFlock(f File) (*os.File, error) {
	path := s.Path(f)
	fd, err := unix.Openat(s.fd[top], string(f), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if errors.Is(err, unix.ELOOP) {
		return nil, notFollowed(s.fd[top], string(f), path, "file")
	}
	if err != nil {
		return nil, errorf(ErrState, "opening %s: %w", path, err)
	}
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return os.NewFile(uintptr(fd), path), nil
	}
	unix.Close(fd)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, nil
	}
	return nil, errorf(ErrState, "locking %s: %w", path, err)
}
