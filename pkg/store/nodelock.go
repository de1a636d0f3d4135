package store

import (
	"errors"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// NodeLockDir is the directory of the node lock: one for the node,
// whatever the dataDirs, for the objects that every dataDir's changes
// share (the uplink marking of table inet external-ip, the policy
// routing's rules and tables). In /run, which only root can write; the
// node process's DaemonSet mounts it from the host.
const NodeLockDir = "/run/external-ip"

const nodeLockName = "node.lock"

// NodeLock is the node lock, held by one invocation of any dataDir at a
// time: an exclusive flock(2) on dir/node.lock, which the kernel drops
// when its process dies.
type NodeLock struct{ fd int }

// LockNode takes the node lock in dir, waiting at most timeout (then
// ErrLockTimeout). dir is made 0700 if missing, and refused (code 7) unless
// only root, or this user, could have changed it and the directories on
// the way; neither dir nor the lock file is ever reached through a
// symlink. It is taken after a dataDir's lock, never before one.
func LockNode(dir string, timeout time.Duration) (*NodeLock, error) {
	dfd, err := openNodeDir(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	path := filepath.Join(dir, nodeLockName)
	fd, err := unix.Openat(dfd, nodeLockName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if errors.Is(err, unix.ELOOP) {
		return nil, errorf(ErrState, "node lock %s is a symlink, which is never followed; remove it", path)
	}
	if err != nil {
		return nil, errorf(ErrState, "opening node lock %s: %w", path, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = errorf(ErrState, "node lock %s is not a file; remove it", path)
	}
	if err == nil {
		err = flockWithin(fd, path, time.Now().Add(timeout), timeout)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &NodeLock{fd: fd}, nil
}

// Unlock releases the node lock.
func (l *NodeLock) Unlock() { unix.Close(l.fd) }

// openNodeDir opens the node lock's directory, making it if missing. The
// way to it resolves as usual; the directory itself is never a symlink.
func openNodeDir(dir string) (int, error) {
	t := trust{"node lock directory", dir}
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return -1, errorf(ErrState, "resolving the node lock directory %s: %w", dir, err)
	}
	if err := t.path(parent); err != nil {
		return -1, err
	}
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errorf(ErrState, "opening %s: %w", parent, err)
	}
	defer unix.Close(pfd)
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	name := filepath.Base(dir)
	fd, err := unix.Openat(pfd, name, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(pfd, name, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, errorf(ErrState, "creating the node lock directory %s: %w", dir, err)
		}
		fd, err = unix.Openat(pfd, name, flags, 0)
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, errorf(ErrState, "node lock directory %s is a symlink or not a directory, and is never followed; remove it", dir)
	case err != nil:
		return -1, errorf(ErrState, "opening the node lock directory %s: %w", dir, err)
	}
	if err := t.state(fd, dir); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
