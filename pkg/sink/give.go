package sink

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	sockName = "sink.sock"
	lockName = "sink.lock"
	// EnvDir, in the environment of this binary, makes it the sink of
	// that dataDir (Serve), its lock on fd 3.
	EnvDir = "EXTERNAL_IP_SINK"
	// lockFD and sockFD are where the child finds the lock Start took and
	// the socket it bound.
	lockFD, sockFD = 3, 4
	// version is the one byte every datagram carries.
	version = 1
	// maxPath is sun_path's size, its terminating NUL included.
	maxPath = 108
)

// ErrAbsent is Give's error when no sink listens in the dataDir.
var ErrAbsent = errors.New("no sink runs")

// Give hands files to dir's sink in one datagram and closes ours. It never
// waits: a sink that is absent (ErrAbsent) or behind (EAGAIN) refuses,
// and the files stay the caller's.
func Give(dir string, files []*os.File) error {
	if len(files) == 0 {
		return nil
	}
	if err := refused(); err != nil {
		return err
	}
	path := filepath.Join(dir, sockName)
	if len(path) >= maxPath {
		return fmt.Errorf("sink socket %s: longer than a unix socket's path may be: %w", path, syscall.ENAMETOOLONG)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sink: socket: %w", err)
	}
	defer unix.Close(s)
	err = unix.Sendmsg(s, []byte{version}, unix.UnixRights(fds...), &unix.SockaddrUnix{Name: path}, unix.MSG_DONTWAIT)
	runtime.KeepAlive(files)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ECONNREFUSED):
		return fmt.Errorf("%w in %s", ErrAbsent, dir)
	case err != nil:
		return fmt.Errorf("handing %d sockets to the sink in %s: %w", len(files), dir, err)
	}
	for _, f := range files {
		f.Close()
	}
	return nil
}

// Start starts dir's sink as a detached child of exe, unless one runs or
// is starting, or no other call came within DefaultIdle: a node whose
// calls are that far apart has no churn to spare, and its calls would
// each pay for a sink that holds one socket. The lock file's time says
// when the last call without a sink came. The child inherits the sink's
// lock, taken here, so that the kernel drops it only when the child is
// gone, and its socket, bound here, so that nothing appears in dir after
// the caller has returned.
func Start(exe, dir string) error {
	if refused() != nil {
		return nil
	}
	lock, err := unix.Open(filepath.Join(dir, lockName), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("sink lock in %s: %w", dir, err)
	}
	defer unix.Close(lock) // the child's copy holds the lock
	if recent, err := touch(lock); err != nil || !recent {
		return err
	}
	if err := unix.Flock(lock, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return nil // one runs, or is starting
	} else if err != nil {
		return fmt.Errorf("sink lock in %s: %w", dir, err)
	}
	sock, err := listen(filepath.Join(dir, sockName))
	if err != nil {
		return err
	}
	defer unix.Close(sock) // the child's copy serves
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("starting the sink: %w", err)
	}
	defer null.Close()
	_, err = syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
		Env:   append(os.Environ(), EnvDir+"="+dir),
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), uintptr(lock), uintptr(sock)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fmt.Errorf("starting the sink %s: %w", exe, err)
	}
	return nil // nobody waits: once we exit, init reaps the child
}

// touch sets the lock file's time to now, by writing its one byte, and
// says whether the last touch (of a call that found no sink) came within
// DefaultIdle. A file just made (its size 0) was never touched.
func touch(lock int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(lock, &st); err != nil {
		return false, fmt.Errorf("sink lock: %w", err)
	}
	if _, err := unix.Pwrite(lock, []byte{'\n'}, 0); err != nil {
		return false, fmt.Errorf("sink lock: %w", err)
	}
	return st.Size > 0 && time.Since(time.Unix(st.Mtim.Unix())) < DefaultIdle, nil
}

// listen binds the sink's socket at path, reachable by root only, a stale
// one from a sink that died first removed: the lock says none runs.
func listen(path string) (int, error) {
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("sink: removing the stale %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("sink: socket: %w", err)
	}
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	if err == nil {
		err = unix.Chmod(path, 0o600) // just made, in a dataDir only root may change
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sink: binding %s: %w", path, err)
	}
	return fd, nil
}
