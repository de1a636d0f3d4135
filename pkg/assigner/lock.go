package assigner

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile is an exclusive flock(2) on the device's lock file. The kernel
// drops it when the process dies, so a crashed invocation never wedges the
// others.
type lockFile struct {
	f *os.File
}

// lock waits up to timeout for the lock. A flock blocked in the kernel
// cannot be given a deadline, so a goroutine blocks in it while the caller
// waits on a timer. Blocking, rather than polling, lets waiters sleep until
// the holder is done: on a busy node, 64 pollers would take the CPU the
// holder needs.
func lock(path string, timeout time.Duration) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return nil, Errorf(ErrState, "opening lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return &lockFile{f: f}, nil // uncontended: no goroutine, no timer
	}
	// The waiter gets its own descriptor of the same open file: the lock
	// belongs to the open file, and the waiter closes its descriptor once
	// flock returns, whoever has stopped waiting by then.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		f.Close()
		return nil, Errorf(ErrState, "locking %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() {
		err := unix.Flock(fd, unix.LOCK_EX)
		for errors.Is(err, unix.EINTR) {
			err = unix.Flock(fd, unix.LOCK_EX)
		}
		unix.Close(fd)
		done <- err
	}()
	return wait(f, path, timeout, done)
}

func wait(f *os.File, path string, timeout time.Duration, done chan error) (*lockFile, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, Errorf(ErrState, "locking %s: %w", path, err)
		}
		return &lockFile{f: f}, nil
	case <-timer.C:
		// Closing f drops the lock should the waiter get it later: its own
		// descriptor is closed as soon as flock returns.
		f.Close()
		return nil, Errorf(ErrLockTimeout, "locking %s: %w after %v", path, ErrLockTimeout, timeout)
	}
}

// unlock closes the file, which releases the flock.
func (l *lockFile) unlock() { l.f.Close() }
