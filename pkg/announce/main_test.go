package announce

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// envDetachHelper makes the test binary act as a plugin that calls Detach
// with the plan in this variable and exits, so a test can read its stdout to
// EOF as a runtime does.
const envDetachHelper = "EXTERNAL_IP_TEST_DETACH"

// envDone names a FIFO to which each detached test binary, once its Runner
// has returned, writes one line: its PID and "ok" or the error. The test
// blocks on that line rather than polling for it.
const envDone = "EXTERNAL_IP_TEST_DONE_FIFO"

// TestMain lets the test binary stand in for the plugin binary, which Detach
// re-executes.
func TestMain(m *testing.M) {
	if v := os.Getenv(EnvPlan); v != "" {
		os.Exit(runDetached(v))
	}
	if v := os.Getenv(envDetachHelper); v != "" {
		os.Exit(runDetachHelper(v))
	}
	os.Exit(m.Run())
}

func runDetached(v string) int {
	result := "ok"
	p, err := PlanFromEnv(v)
	if err == nil {
		err = Runner{}.Run(p)
	}
	if err != nil {
		result = err.Error()
	}
	if fifo := os.Getenv(envDone); fifo != "" {
		return reportDone(fifo, result)
	}
	return 0
}

// reportDone writes the line in one write, shorter than PIPE_BUF so that
// children writing at once do not interleave. O_NONBLOCK: a test that has
// already ended and closed the FIFO fails the open instead of hanging the
// child for ever.
func reportDone(fifo, result string) int {
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 1
	}
	defer f.Close()
	line := fmt.Sprintf("%d %s", os.Getpid(), strings.ReplaceAll(result, "\n", " "))
	if _, err := f.WriteString(line[:min(len(line), 1000)] + "\n"); err != nil {
		return 1
	}
	return 0
}

func runDetachHelper(v string) int {
	var p Plan
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := Detach(exe, p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
