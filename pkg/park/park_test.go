package park

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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
// closed: reading then ends at once with EOF, and with the deadline's
// timeout while a write end is open.
func hungUp(t *testing.T, r *os.File) bool {
	t.Helper()
	if err := r.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil { // what was written before comes first
		_, err = r.Read(make([]byte, 64))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("reading the pipe: %v", err)
	}
	return errors.Is(err, io.EOF)
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
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the parked write end was still open 10s after its process exited: the kernel kept it")
	}
	if err != nil {
		t.Fatalf("reading to the end: %v", err)
	}
}

// A refused Files registers nothing: the open file is still the caller's
// to write and to close, and nothing else holds it.
func TestARefusedFilesLeavesTheFilesToTheCaller(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files func(w *os.File) []*os.File
	}{
		{"a closed file beside it", func(w *os.File) []*os.File {
			_, closed := pipe(t)
			closed.Close()
			return []*os.File{w, closed}
		}},
		{"the same file twice", func(w *os.File) []*os.File { return []*os.File{w, w} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, w := pipe(t)
			if err := Files(tt.files(w)); err == nil {
				t.Fatal("Files succeeded, want it refused before anything is registered")
			}
			if _, err := w.Write([]byte("x")); err != nil {
				t.Errorf("a refused Files closed the file: %v", err)
			}
			w.Close()
			if !hungUp(t, r) {
				t.Error("a refused Files still holds the file")
			}
		})
	}
}

func TestAKernelWithoutCQESkipIsTooOldToPark(t *testing.T) {
	if err := recentEnough(0x7ff); !errors.Is(err, syscall.ENOTSUP) {
		t.Errorf("features of Linux 5.16 (bits 0 to 10) = %v, want ENOTSUP: its file registration may quiesce", err)
	}
	if err := recentEnough(featCQESkip | 0x7ff); err != nil {
		t.Errorf("features of Linux 5.17 = %v, want usable", err)
	}
}
