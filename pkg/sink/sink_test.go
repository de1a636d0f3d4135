package sink

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testQuiet, testIdle = 500 * time.Millisecond, 2 * time.Second

// TestMain is also the sink that Start starts in these tests: this test
// binary, run with EnvDir set.
func TestMain(m *testing.M) {
	if dir := os.Getenv(EnvDir); dir != "" {
		most, _ := strconv.Atoi(os.Getenv("SINK_TEST_MAX"))
		quiet := testQuiet
		if most > 0 {
			quiet = 10 * time.Second // so that only Max releases
		}
		if err := Serve(dir, Options{Quiet: quiet, Idle: max(testIdle, 2*quiet), Max: most}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startSink starts a sink in a new directory, with at most most held (0:
// the default), and waits until it takes a datagram.
func startSink(t *testing.T, most int) string {
	t.Helper()
	return startSinkIn(t, t.TempDir(), most)
}

// startSinkIn is startSink in dir.
func startSinkIn(t *testing.T, dir string, most int) string {
	t.Helper()
	t.Setenv("SINK_TEST_MAX", strconv.Itoa(most))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Start(exe, dir); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, sockName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the first Start, with no call before it, started a sink: %v", err)
	}
	if err := Start(exe, dir); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, sockName)); err != nil {
		t.Fatalf("a second Start within DefaultIdle returned before the socket was there: %v", err)
	}
	t.Cleanup(func() { waitUnlocked(t, dir, 2*testIdle) })
	return dir
}

// waitUnlocked waits until no sink holds dir's lock.
func waitUnlocked(t *testing.T, dir string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for locked(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("the sink of %s still runs after %s", dir, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func locked(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, lockName), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening the lock: %v", err)
	}
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err != nil && !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock: %v", err)
	}
	return err != nil
}

// pipe is a pipe whose write end is for Give: the read end sees EOF once
// the sink closes it.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, w
}

// closedWithin says whether r sees EOF within d.
func closedWithin(t *testing.T, r *os.File, d time.Duration) bool {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(d))
	_, err := r.Read(make([]byte, 1))
	switch {
	case err == io.EOF:
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	t.Fatalf("reading the pipe: %v", err)
	return false
}

func TestGiveWithNoSinkLeavesTheFilesToTheCaller(t *testing.T) {
	r, w := pipe(t)
	defer w.Close()
	err := Give(t.TempDir(), []*os.File{w})
	if !errors.Is(err, ErrAbsent) {
		t.Fatalf("Give with no sink: %v, want ErrAbsent", err)
	}
	if w.Fd() == ^uintptr(0) {
		t.Fatal("Give closed the caller's file")
	}
	if closedWithin(t, r, 10*time.Millisecond) {
		t.Fatal("EOF while the caller holds the write end")
	}
}

// The sink holds what it is given while more keeps coming, and closes it
// all once none has come for Quiet.
func TestTheSinkHoldsUntilQuiet(t *testing.T) {
	dir := startSink(t, 0)
	var reads []*os.File
	for range 4 {
		r, w := pipe(t)
		if err := Give(dir, []*os.File{w}); err != nil {
			t.Fatalf("Give: %v", err)
		}
		if w.Fd() != ^uintptr(0) {
			t.Fatal("Give left the caller's copy open")
		}
		reads = append(reads, r)
		time.Sleep(testQuiet / 6)
	}
	if closedWithin(t, reads[0], testQuiet/6) {
		t.Fatalf("the first file was closed while others came less than %s apart", testQuiet)
	}
	for i, r := range reads {
		if !closedWithin(t, r, testQuiet+time.Second) {
			t.Fatalf("file %d still open %s after the last came", i, testQuiet+time.Second)
		}
	}
}

// A socket's address holds 108 bytes; a dataDir's path may be longer,
// and its sink serves it all the same.
func TestASinkServesADirOfAnyLength(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 200))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	startSinkIn(t, dir, 0)
	r, w := pipe(t)
	if err := Give(dir, []*os.File{w}); err != nil {
		t.Fatalf("Give to the sink of a %d-byte path: %v", len(dir), err)
	}
	if !closedWithin(t, r, testQuiet+time.Second) {
		t.Fatalf("the sink of a %d-byte path did not release what it was given", len(dir))
	}
}

// Past Max the oldest go at once; the newest stay.
func TestTheSinkReleasesTheOldestPastMax(t *testing.T) {
	dir := startSink(t, 2)
	var reads []*os.File
	for range 3 {
		r, w := pipe(t)
		if err := Give(dir, []*os.File{w}); err != nil {
			t.Fatalf("Give: %v", err)
		}
		reads = append(reads, r)
	}
	if !closedWithin(t, reads[0], 2*time.Second) {
		t.Fatal("the oldest was not released past Max")
	}
	if closedWithin(t, reads[2], 100*time.Millisecond) {
		t.Fatal("the newest was released before the quiet")
	}
	unix.Kill(sinkPID(t, dir), unix.SIGKILL) // its quiet is 10 s
}

// One sink per directory: a second Start while one runs starts none; the
// sink removes its socket and frees its lock once idle, and Give then
// finds none.
func TestOneSinkThatExitsWhenIdle(t *testing.T) {
	dir := startSink(t, 0)
	exe, _ := os.Executable()
	if err := Start(exe, dir); err != nil {
		t.Fatalf("a second Start: %v", err)
	}
	if !locked(t, dir) {
		t.Fatal("no sink holds the lock after Start")
	}
	r, w := pipe(t)
	if err := Give(dir, []*os.File{w}); err != nil {
		t.Fatalf("Give: %v", err)
	}
	if !closedWithin(t, r, testQuiet+time.Second) {
		t.Fatal("not released after the quiet")
	}
	waitUnlocked(t, dir, 2*testIdle)
	if _, err := os.Lstat(filepath.Join(dir, sockName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the idle sink left its socket: %v", err)
	}
	_, w2 := pipe(t)
	defer w2.Close()
	if err := Give(dir, []*os.File{w2}); !errors.Is(err, ErrAbsent) {
		t.Fatalf("Give after the sink exited: %v, want ErrAbsent", err)
	}
}

// A sink killed releases what it held (the kernel closes it all); the
// next Give finds its stale socket and none behind it, and the next Start
// takes the lock it left and serves again.
func TestAKilledSinkIsReplaced(t *testing.T) {
	dir := startSink(t, 0)
	pid := sinkPID(t, dir)
	r, w := pipe(t)
	if err := Give(dir, []*os.File{w}); err != nil {
		t.Fatalf("Give: %v", err)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(t, r, time.Second) {
		t.Fatal("what the killed sink held is still open")
	}
	_, w2 := pipe(t)
	defer w2.Close()
	deadline := time.Now().Add(time.Second)
	for err := Give(dir, []*os.File{w2}); !errors.Is(err, ErrAbsent); err = Give(dir, []*os.File{w2}) {
		if time.Now().After(deadline) {
			t.Fatalf("Give to the killed sink's socket: %v, want ErrAbsent", err)
		}
		time.Sleep(10 * time.Millisecond) // the kernel closes the socket as the process goes
	}
	exe, _ := os.Executable()
	if err := Start(exe, dir); err != nil {
		t.Fatalf("Start after the kill: %v", err)
	}
	if err := Give(dir, []*os.File{w2}); err != nil {
		t.Fatalf("Give to the new sink: %v", err)
	}
}

// sinkPID is the pid of the process serving dir.
func sinkPID(t *testing.T, dir string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err == nil && slices.Contains(strings.Split(string(env), "\x00"), EnvDir+"="+dir) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	t.Fatalf("no process serves %s", dir)
	return 0
}

// Calls further apart than DefaultIdle start no sink: the second Start
// after a lock file last touched long ago starts none, and one soon
// after it does.
func TestStartAfterALongQuietStartsNone(t *testing.T) {
	dir := t.TempDir()
	exe, _ := os.Executable()
	lock, sock := filepath.Join(dir, lockName), filepath.Join(dir, sockName)
	if err := Start(exe, dir); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-DefaultIdle - time.Second)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	if err := Start(exe, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a Start %s after the last started a sink: %v", DefaultIdle+time.Second, err)
	}
	if err := Start(exe, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("a Start right after the last started none: %v", err)
	}
	waitUnlocked(t, dir, 2*testIdle)
}

// A symlink planted at the sink's socket leads nowhere: Give says no sink
// runs and sends nothing to the socket it points at.
func TestGiveFollowsNoSymlink(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	elsewhere := filepath.Join(out, "elsewhere.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: elsewhere}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, sockName)); err != nil {
		t.Fatal(err)
	}
	_, w := pipe(t)
	defer w.Close()
	if err := Give(dir, []*os.File{w}); !errors.Is(err, ErrAbsent) {
		t.Fatalf("Give through a symlink: %v, want ErrAbsent", err)
	}
	if _, _, _, _, err := unix.Recvmsg(fd, make([]byte, 1), nil, unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("the socket the symlink points at got a datagram (recvmsg: %v)", err)
	}
}

// A sink that does not read (stopped, or behind) makes Give fail at once
// with EAGAIN, not wait: the caller parks its sockets instead.
func TestGiveNeverWaits(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, sockName)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		r, w := pipe(t)
		err := Give(dir, []*os.File{w})
		if err == nil {
			if i > 10_000 {
				t.Fatal("the unread socket took 10,000 datagrams")
			}
			continue
		}
		if !errors.Is(err, unix.EAGAIN) || errors.Is(err, ErrAbsent) {
			t.Fatalf("Give to a full socket: %v, want EAGAIN", err)
		}
		if closedWithin(t, r, 10*time.Millisecond) {
			t.Fatal("the refused file was closed: it stays the caller's")
		}
		w.Close()
		return
	}
}
