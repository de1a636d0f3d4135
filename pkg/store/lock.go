package store

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is the state lock of one invocation: an exclusive flock(2) on
// the dataDir directory itself, then on the device's legacy lock file. The
// kernel drops both when the process dies, so a crash never wedges the
// others. Unlock also closes the state directory's handles.
type Lock struct {
	st *Store
}

// flockWithin waits until deadline for an exclusive flock on fd. A flock
// blocked in the kernel cannot be given a deadline, so a goroutine blocks
// in it while the caller waits on a timer. Blocking, rather than polling,
// lets waiters sleep until the holder is done: on a busy node, 64 pollers
// would take the CPU the holder needs.
func flockWithin(fd int, name string, deadline time.Time, timeout time.Duration) error {
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return nil // uncontended: no goroutine, no timer
	}
	// The waiter gets its own descriptor of the same open file: the lock
	// belongs to the open file, and the waiter closes its descriptor once
	// flock returns, whoever has stopped waiting by then. The caller closes
	// fd on a timeout, which drops the lock should the waiter get it later.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return errorf(ErrState, "locking %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() {
		err := unix.Flock(dup, unix.LOCK_EX)
		for errors.Is(err, unix.EINTR) {
			err = unix.Flock(dup, unix.LOCK_EX)
		}
		unix.Close(dup)
		done <- err
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return errorf(ErrState, "locking %s: %w", name, err)
		}
		return nil
	case <-timer.C:
		return errorf(ErrLockTimeout, "locking %s: %w after %v", name, ErrLockTimeout, timeout)
	}
}

// sameFile says whether two stats are of one inode.
func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// stillAt says whether fd is still the directory that path names: a waiter
// that opened dataDir before someone removed or replaced it must not run
// beside an invocation that locked the new one.
func stillAt(fd int, path string) (bool, error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(fd, &held); err != nil {
		return false, err
	}
	err := unix.Stat(path, &now)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return false, nil // gone, or a directory on the way replaced
	}
	return err == nil && sameFile(&held, &now), err
}

// Unlock closes every handle of the state directory, which releases the
// flocks.
func (l *Lock) Unlock() { l.st.close() }
