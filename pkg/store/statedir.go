package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// systemDirs are never a dataDir: the plugin would make its directories
// among the system's own. systemTrees are refused with everything under
// them: they hold the system, or are the kernel's.
var (
	systemDirs = []string{"/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/run/lock", "/run/user",
		"/srv", "/tmp", "/var", "/var/cache", "/var/lib", "/var/log", "/var/run", "/var/tmp"}
	systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
		"/proc", "/sbin", "/sys", "/usr"}
)

// trust judges the directories on the way to the state and the state's
// own, for the configured dataDir (or the node lock's directory), which a
// refusal names: whether only root (or this user) could have changed them.
type trust struct{ what, value string }

// dataDirTrust judges the way to and the directories of dataDir.
func dataDirTrust(dataDir string) trust { return trust{"dataDir", dataDir} }

// refuse is a refusal of the configured dataDir (code 7).
func (t trust) refuse(format string, args ...any) error {
	return errorf(ErrRefused, "%s: %q: %s", t.what, t.value, fmt.Sprintf(format, args...))
}

// isSystemDir says whether path is one of the system's directories.
func isSystemDir(path string) bool {
	if slices.Contains(systemDirs, path) {
		return true
	}
	for _, t := range systemTrees {
		if path == t || strings.HasPrefix(path, t+"/") {
			return true
		}
	}
	return false
}

// resolve follows the symlinks of the part of path that exists, as the path
// to dataDir resolves as usual (/var/run is a symlink), and appends the rest.
func resolve(path string) (string, string, error) {
	rest := ""
	for p := path; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), r, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || p == "/" {
			return "", "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// prepare checks where dataDir is and, to create it, makes what is
// missing of it. Every existing directory on the way must be one that only
// root (or this user) can change: otherwise another user could swap in
// state of their own, a journal that the next invocation replays.
func (s *Store) prepare(create bool) (string, error) {
	if isSystemDir(s.dataDir) {
		return "", dataDirTrust(s.dataDir).refuse("is a system directory")
	}
	resolved, existing, err := resolve(s.dataDir)
	if err != nil {
		return "", errorf(ErrState, "resolving dataDir %s: %w", s.dataDir, err)
	}
	if isSystemDir(resolved) {
		return "", dataDirTrust(s.dataDir).refuse("is the system directory %s", resolved)
	}
	if err := dataDirTrust(s.dataDir).path(existing); err != nil || !create || existing == resolved {
		return resolved, err
	}
	s.beforeMkdir.at(existing)
	if err := os.MkdirAll(resolved, dirMode); err != nil {
		return "", errorf(ErrState, "creating dataDir %s: %w", resolved, err)
	}
	// A directory on the way that another user made first, between the
	// check and MkdirAll (under a sticky /tmp, say), is theirs: checked
	// again now that the whole path exists.
	return resolved, dataDirTrust(s.dataDir).path(resolved)
}

// path checks path and each of its ancestors (ancestor).
func (t trust) path(path string) error {
	for p := path; ; p = filepath.Dir(p) {
		if err := t.ancestor(p); err != nil {
			return err
		}
		if p == "/" {
			return nil
		}
	}
}

// ancestor refuses a directory on the way to the state that another user
// owns, or that others may write to without the sticky bit (which keeps
// them from renaming or removing what is not theirs).
func (t trust) ancestor(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return errorf(ErrState, "checking %s %s: %s: %w", t.what, t.value, path, err)
	}
	if err := t.owner(path, &st); err != nil {
		return err
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return t.refuse("%s is writable by other users and not sticky, so they could plant state there", path)
	}
	return nil
}

func (t trust) owner(path string, st *unix.Stat_t) error {
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return t.refuse("%s is owned by uid %d, not by root", path, st.Uid)
	}
	return nil
}

// state refuses a directory of the state itself that another user owns
// or may write to: its journal and records are trusted only if nobody
// but root could have written them.
func (t trust) state(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errorf(ErrState, "checking state directory %s: %w", path, err)
	}
	if err := t.owner(path, &st); err != nil {
		return err
	}
	if st.Mode&0o022 != 0 {
		return t.refuse("%s has mode %04o: other users could plant state there; make it 0700", path, st.Mode&0o7777)
	}
	return nil
}

// openData opens dataDir, found false when it does not exist and is not to
// be created.
func (s *Store) openData(create bool) (bool, error) {
	resolved, err := s.prepare(create)
	if err != nil {
		return false, err
	}
	fd, err := unix.Open(resolved, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && !create {
		return false, nil
	}
	if err != nil {
		return false, errorf(ErrState, "opening dataDir %s: %w", s.dataDir, err)
	}
	s.fd[data] = fd // closed with the store from here on
	s.resolved = resolved
	return true, dataDirTrust(s.dataDir).state(fd, s.dataDir)
}

// openInside opens the device's directory and its subdirectories relative
// to dataDir's handle, never through a symlink. found is false when the
// device has no state directory and none is to be made, or, to read, when
// att/ or ip/ is missing: a reader makes nothing, and needs no tmp/.
func (s *Store) openInside(mode Access) (bool, error) {
	root, err := s.openDir(s.fd[data], s.device, s.dir, mode == MakeAll)
	if err != nil || root < 0 {
		return false, s.missing(mode == MakeAll, err, s.dir)
	}
	s.fd[top] = root
	for _, w := range []where{inTmp, inAtt, inIP} {
		// The device's directory exists: a writer makes its
		// subdirectories whoever comes, as they are ours.
		fd, err := s.openDir(root, subdirs[w], s.path(w, ""), mode != ReadOnly)
		if fd < 0 && err == nil && mode == ReadOnly && w == inTmp {
			continue // a reader stages nothing: the records are still there
		}
		if err != nil || fd < 0 {
			return false, s.missing(mode != ReadOnly, err, s.path(w, ""))
		}
		s.fd[w] = fd
	}
	return true, nil
}

// missing is what a part of the state that is not there means: no state
// to one that does not make it, and to one that has just made it, that
// someone removed it meanwhile (never a lock without its state).
func (s *Store) missing(made bool, err error, path string) error {
	if err != nil || !made {
		return err
	}
	return errorf(ErrState, "state directory %s: vanished while being opened", path)
}

// openDir opens the directory name under parent, making it if asked; -1
// when it does not exist.
func (s *Store) openDir(parent int, name, path string, create bool) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdirat(parent, name, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, errorf(ErrState, "creating state directory %s: %w", path, err)
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, notFollowed(parent, name, path, "directory")
	case err != nil:
		return -1, errorf(ErrState, "opening state directory %s: %w", path, err)
	}
	if err := dataDirTrust(s.dataDir).state(fd, path); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// notFollowed is the error for a name in the state directory that is a
// symlink or not of the kind expected.
func notFollowed(dir int, name, path, kind string) error {
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errorf(ErrState, "state %s %s is a symlink, which is never followed inside dataDir; remove it", kind, path)
	}
	return errorf(ErrState, "state %s %s is not a %s; remove it", kind, path, kind)
}

// Access is how much of the state directory an invocation may make.
type Access int

const (
	// ReadOnly makes nothing: status, CHECK and the announcer's re-check
	// only read; a missing att/ or ip/ means there is no state, while a
	// missing tmp/ or lock file hides no record.
	ReadOnly Access = iota
	// MakeParts makes the device directory's own parts (tmp/, att/, ip/,
	// lock) but neither dataDir nor the device directory: DEL and GC
	// write only where state exists.
	MakeParts
	// MakeAll makes whatever is missing: ADD.
	MakeAll
)

// Lock opens the state directory and takes its lock, retrying while the
// dataDir it locked is no longer the one at its path. A nil lock and no
// error: there is no state and none is to be made.
func (s *Store) Lock(mode Access, timeout time.Duration) (*Lock, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, retry, err := s.tryLock(mode, deadline, timeout)
		if !retry {
			return l, err
		}
		s.close()
		if time.Now().After(deadline) {
			return nil, errorf(ErrLockTimeout, "locking %s: %w after %v", s.dataDir, ErrLockTimeout, timeout)
		}
	}
}

func (s *Store) tryLock(mode Access, deadline time.Time, timeout time.Duration) (l *Lock, retry bool, err error) {
	defer func() {
		if l == nil && !retry {
			s.close()
		}
	}()
	found, err := s.openData(mode == MakeAll)
	if err != nil || !found {
		return nil, false, err
	}
	if err := flockWithin(s.fd[data], s.dataDir, deadline, timeout); err != nil {
		return nil, false, err
	}
	// Removed or replaced while this invocation waited: whoever comes next
	// locks the new one, so this one starts over there.
	// Any other failure to tell is its own error, not a wait that ends in
	// a lock timeout.
	same, err := stillAt(s.fd[data], s.resolved)
	if err != nil {
		return nil, false, errorf(ErrState, "checking that dataDir %s is still the one locked: %w", s.dataDir, err)
	}
	if !same {
		return nil, true, nil
	}
	if found, err = s.openInside(mode); err != nil || !found {
		return nil, false, err
	}
	if found, err = s.lockLegacy(mode, deadline, timeout); err != nil || !found {
		return nil, false, err
	}
	return &Lock{st: s}, false, nil
}

// lockLegacy also takes the device's lock file, which binaries from before
// the dataDir lock take instead: an upgrade's old and new invocations still
// exclude each other. A reader does not make it, and reads without it.
func (s *Store) lockLegacy(mode Access, deadline time.Time, timeout time.Duration) (bool, error) {
	path := s.path(top, lockName)
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if mode == ReadOnly {
		flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC // flock needs no write access
	}
	fd, err := unix.Openat(s.fd[top], lockName, flags, fileMode)
	switch {
	case errors.Is(err, unix.ENOENT) && mode == ReadOnly:
		// The dataDir lock is held; without its file an older binary,
		// which would make it, is not running: the records still count.
		return true, nil
	case errors.Is(err, unix.ELOOP):
		return false, notFollowed(s.fd[top], lockName, path, "file")
	case err != nil:
		return false, errorf(ErrState, "opening lock %s: %w", path, err)
	}
	s.fd[lock] = fd
	return true, flockWithin(fd, path, deadline, timeout)
}

// close closes every handle the store holds, which drops its locks.
func (s *Store) close() {
	for i, fd := range s.fd {
		if fd >= 0 {
			unix.Close(fd)
		}
		s.fd[i] = -1
	}
}
