package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// An uninstall must win against an `install --watch` that is still running
// (a DaemonSet pod still terminating after `kubectl delete` returned):
// otherwise the watcher sees the restored config and chains us back in.
// So uninstall leaves a mark in our directory of the conf dir, written
// under the conf dir's lock before it changes anything; a running watcher
// checks it under the same lock before each chaining and, marked, chains
// nothing more. A watcher that starts later, or a one-shot install, is a
// new decision to install: it clears the mark.
//
// Each watcher holds a shared flock on CONF/.external-ip/watching while it
// runs, so that uninstall can tell whether anyone is left to obey the mark:
// when nobody is, it removes the mark too and the conf dir is as before.
const (
	markName  = "uninstalled"
	watchName = "watching"
)

// ErrUninstalled: external-ip uninstall ran while this watcher was running.
var ErrUninstalled = errors.New("external-ip uninstall ran")

func (s undoStore) markPath() string { return filepath.Join(s.dir, markName) }

// mark records that an uninstall is under way or done.
func (s undoStore) mark(now time.Time) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	text := fmt.Sprintf("external-ip uninstall ran at %s (pid %d); a running install --watch chains nothing more\n", now.UTC().Format(time.RFC3339Nano), os.Getpid())
	return atomicfile.Write(s.dir, markName, []byte(text), atomicfile.Meta{Mode: 0o600, UID: os.Getuid(), GID: os.Getgid()}, s.fault)
}

// marked is an error of kind ErrUninstalled when the mark is there.
func (s undoStore) marked() error {
	data, _, err := atomicfile.ReadRegular(s.dir, markName)
	switch {
	case err != nil:
		return err
	case data == nil:
		return nil
	}
	return fmt.Errorf("%w (%s: %s)", ErrUninstalled, s.markPath(), strings.TrimSpace(string(data)))
}

func (s undoStore) clearMark() error {
	if _, err := os.Lstat(s.markPath()); os.IsNotExist(err) {
		return nil
	}
	return atomicfile.Remove(s.dir, markName, s.fault)
}

func (s undoStore) mkdir() error {
	if err := os.Mkdir(s.dir, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("undo directory %s: %w", s.dir, err)
	}
	return s.checkDir()
}

// holdWatch takes a watcher's shared lock, held until release.
func (s undoStore) holdWatch() (release func(), err error) {
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	path := filepath.Join(s.dir, watchName)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("watch lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("watch lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// watcherRunning says whether an install --watch holds its lock now.
func (s undoStore) watcherRunning() (bool, error) {
	path := filepath.Join(s.dir, watchName)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("watch lock %s: %w", path, err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// leave ends an uninstall that left nothing for later (no watcher runs:
// see Installer.pending): the mark, the watchers' lock file and the copy
// of a binary put back go, then our directory, and the conf dir is as
// before the first install.
func (s undoStore) leave() error {
	if err := atomicfile.SweepTemps(s.dir); err != nil {
		return err
	}
	for _, name := range []string{markName, watchName, originalName} {
		if err := atomicfile.Remove(s.dir, name, s.fault); err != nil {
			return err
		}
	}
	return s.removeDir()
}
