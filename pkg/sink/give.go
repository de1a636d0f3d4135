package sink

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/detach"
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
	// maxFiles is the most descriptors a datagram carries: the sink
	// receives that many at once, and the kernel would close any more.
	maxFiles = 16
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
	if len(files) > maxFiles {
		return fmt.Errorf("handing %d sockets to the sink: at most %d at once", len(files), maxFiles)
	}
	if err := refused(); err != nil {
		return err
	}
	to, err := sockAt(dir)
	if err != nil {
		return err
	}
	defer unix.Close(to.fd)
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sink: socket: %w", err)
	}
	defer unix.Close(s)
	err = unix.Sendmsg(s, []byte{version}, unix.UnixRights(fds...), &to.addr, unix.MSG_DONTWAIT)
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

// sockAt is dir's sink socket, addressed through an O_PATH descriptor of
// it opened without following a symlink: sendmsg would follow one planted
// there, out of the state directory. Anything but a socket there is no
// sink (Start replaces it). A path of any length works this way.
func sockAt(dir string) (*target, error) {
	fd, err := unix.Open(filepath.Join(dir, sockName), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%w in %s", ErrAbsent, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("sink socket in %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return nil, fmt.Errorf("%w in %s: its %s is not a socket", ErrAbsent, dir, sockName)
	}
	return &target{fd: fd, addr: unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(fd)}}, nil
}

// target is the sink's socket: the descriptor that pins it, and its
// address through that descriptor.
type target struct {
	fd   int
	addr unix.SockaddrUnix
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
	lock, made, err := openLock(filepath.Join(dir, lockName))
	if err != nil {
		return fmt.Errorf("sink lock in %s: %w", dir, err)
	}
	defer unix.Close(lock) // the child's copy holds the lock
	if recent, err := touch(lock); err != nil || made || !recent {
		return err
	}
	if err := unix.Flock(lock, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return nil // one runs, or is starting
	} else if err != nil {
		return fmt.Errorf("sink lock in %s: %w", dir, err)
	}
	sock, err := listen(dir)
	if err != nil {
		return err
	}
	defer unix.Close(sock) // the child's copy serves
	if err := detach.Start(exe, EnvDir+"="+dir, uintptr(lock), uintptr(sock)); err != nil {
		return fmt.Errorf("starting the sink %s: %w", exe, err)
	}
	return nil
}

// openLock opens the sink's lock file, an empty file as the state's other
// locks are, and says whether it made it: a call that makes it is the
// first to find no sink. O_NONBLOCK: a FIFO planted there must not hold
// the call.
func openLock(path string) (fd int, made bool, err error) {
	const flags = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err = unix.Open(path, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		made = err == nil
	}
	return fd, made, err
}

// touch sets the lock file's times to now and says whether the last touch
// (of a call that found no sink) came within DefaultIdle.
func touch(lock int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(lock, &st); err != nil {
		return false, fmt.Errorf("sink lock: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false, fmt.Errorf("sink lock: not a file of ours alone (mode %#o, %d links); remove it", st.Mode, st.Nlink)
	}
	now := unix.NsecToTimeval(time.Now().UnixNano())
	if err := unix.Futimes(lock, []unix.Timeval{now, now}); err != nil {
		return false, fmt.Errorf("sink lock: %w", err)
	}
	return time.Since(time.Unix(st.Mtim.Unix())) < DefaultIdle, nil
}

// listen binds dir's sink socket, reachable by root only, a stale one
// from a sink that died first removed (the lock says none runs). It binds
// through an O_PATH descriptor of dir: a sun_path holds 108 bytes, and a
// dataDir's path may be longer; "/proc/self/fd/N/sink.sock" never is.
func listen(dir string) (int, error) {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("sink: %w", err)
	}
	defer unix.Close(d)
	path := filepath.Join(dir, sockName)
	// Unlinkat removes a symlink, never what it points to.
	if err := unix.Unlinkat(d, sockName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("sink: removing the stale %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("sink: socket: %w", err)
	}
	// Its mode is the umask's: connecting needs write access, which only
	// its owner (root) has under the usual 022, and the dataDir is root's
	// alone. A chmod would follow a symlink swapped in after the bind.
	at := "/proc/self/fd/" + strconv.Itoa(d) + "/" + sockName
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: at}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sink: binding %s: %w", path, err)
	}
	return fd, nil
}
