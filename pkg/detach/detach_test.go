package detach

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envChild makes the test binary the child: it writes what it sees of
// itself to the file the variable names, then exits.
const envChild = "DETACH_TEST_CHILD"

// seen is what the child reports of itself.
type seen struct {
	Pid, Sid, Pgid int
	Cwd            string
	Stdio          [3]string // what descriptors 0 to 2 lead to
	Extra          string    // what it read from descriptor 3
	Env            []string
}

func TestMain(m *testing.M) {
	if out := os.Getenv(envChild); out != "" {
		os.Exit(child(out))
	}
	os.Exit(m.Run())
}

func child(out string) int {
	var s seen
	s.Pid, s.Pgid = os.Getpid(), syscall.Getpgrp()
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if errno != 0 {
		return 2
	}
	s.Sid = int(sid)
	s.Cwd, _ = os.Getwd()
	for fd := range 3 {
		s.Stdio[fd], _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	}
	b, _ := io.ReadAll(os.NewFile(3, "extra"))
	s.Extra, s.Env = string(b), os.Environ()
	j, _ := json.Marshal(s)
	if os.WriteFile(out+".tmp", j, 0o600) != nil || os.Rename(out+".tmp", out) != nil {
		return 2
	}
	return 0
}

func TestStartDetachesTheChildFromTheCaller(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seen.json")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString("handed over"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Setenv("DETACH_TEST_INHERITED", "yes")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Start(exe, envChild+"="+out, r.Fd()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	s := waitSeen(t, out)
	if s.Sid != s.Pid || s.Pgid != s.Pid || s.Sid == syscall.Getpid() {
		t.Errorf("child pid %d has session %d and group %d, want a session of its own", s.Pid, s.Sid, s.Pgid)
	}
	if s.Cwd != "/" {
		t.Errorf("child works in %q, want /", s.Cwd)
	}
	for fd, p := range s.Stdio {
		if p != os.DevNull {
			t.Errorf("child's descriptor %d leads to %q, want %s", fd, p, os.DevNull)
		}
	}
	if s.Extra != "handed over" {
		t.Errorf("child read %q from descriptor 3, want what was written into the pipe handed to it", s.Extra)
	}
	env := strings.Join(s.Env, "\n")
	if !strings.Contains(env, "DETACH_TEST_INHERITED=yes") || !strings.Contains(env, envChild+"="+out) {
		t.Errorf("child's environment lacks ours or the variable Start added:\n%s", env)
	}
}

func TestStartSaysWhyAChildCouldNotStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-binary")
	if err := Start(missing, envChild+"=x"); err == nil || !os.IsNotExist(err) {
		t.Fatalf("Start(%s) = %v, want a not-exist error", missing, err)
	}
}

func waitSeen(t *testing.T, out string) seen {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(out)
		if err != nil {
			continue
		}
		var s seen
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("child's report %s: %v", b, err)
		}
		return s
	}
	t.Fatalf("the child wrote no %s within 10 s", out)
	return seen{}
}
