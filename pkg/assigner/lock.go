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

// Polling bounds: short first waits keep an uncontended lock fast; the cap
// keeps a waiter from sleeping long after the holder is done.
const (
	firstPoll = 50 * time.Microsecond
	maxPoll   = 2 * time.Millisecond
)

// lock waits up to timeout for the lock. A flock blocked in the kernel
// cannot be given a deadline, so it polls with LOCK_NB and backs off.
func lock(path string, timeout time.Duration) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return nil, kindf(ErrState, "opening lock %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	wait := firstPoll
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &lockFile{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, kindf(ErrState, "locking %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, kindf(ErrLockTimeout, "locking %s: %w after %v", path, ErrLockTimeout, timeout)
		}
		time.Sleep(wait)
		wait = min(wait*2, maxPoll)
	}
}

// unlock closes the file, which releases the flock.
func (l *lockFile) unlock() { l.f.Close() }
