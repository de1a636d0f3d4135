package park

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// envParkHelper makes the test binary park its fd 3 and exit at once, as
// the plugin does with its slow sockets.
const envParkHelper = "EXTERNAL_IP_TEST_PARK"

func TestMain(m *testing.M) {
	if os.Getenv(envParkHelper) != "" {
		if err := Files([]*os.File{os.NewFile(3, "inherited")}); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hungUp says whether every write end of the pipe whose read end is r is
// closed.
func hungUp(t *testing.T, r *os.File) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 0); err != nil {
		t.Fatal(err)
	}
	return fds[0].Revents&unix.POLLHUP != 0
}

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestAParkedFileOutlivesTheCallersCopy(t *testing.T) {
	r, w := pipe(t)
	if err := Files([]*os.File{w}); err != nil {
		t.Fatalf("Files: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write to the caller's copy after Files = %v, want it closed", err)
	}
	if hungUp(t, r) {
		t.Error("the pipe hung up: nothing holds the parked write end")
	}
}

func TestAParkedFileIsReleasedOnceTheProcessHasExited(t *testing.T) {
	r, w := pipe(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envParkHelper+"=1")
	cmd.ExtraFiles = []*os.File{w}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("reading to the end: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked write end was still open 10s after its process exited: the kernel kept it")
	}
}

func TestAClosedFileIsRefusedAndTheOthersStayTheCallers(t *testing.T) {
	r, w := pipe(t)
	closed, _ := pipe(t)
	closed.Close()
	err := Files([]*os.File{w, closed})
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Files with a closed file = %v, want os.ErrClosed", err)
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Errorf("the open file was closed by a refused Files: %v", err)
	}
	w.Close()
	if !hungUp(t, r) {
		t.Error("a refused Files still holds the file")
	}
}

func TestNothingToParkMakesNoRing(t *testing.T) {
	before := openFDs(t)
	if err := Files(nil); err != nil {
		t.Errorf("Files(nil) = %v", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("Files(nil) left %d descriptors open, want %d as before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
