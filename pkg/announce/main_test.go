package announce

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// envDetachHelper makes the test binary act as a plugin that calls Detach
// with the plan in this variable and exits, so a test can read its stdout to
// EOF as a runtime does.
const envDetachHelper = "EXTERNAL_IP_TEST_DETACH"

// envDoneDir names a directory where each detached test binary, once its Runner
// has returned, writes PID.done holding "ok" or the error.
const envDoneDir = "EXTERNAL_IP_TEST_DONE_DIR"

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
	if dir := os.Getenv(envDoneDir); dir != "" {
		// Renamed into place so that a waiting test never reads it half written.
		f := filepath.Join(dir, strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(f+".tmp", []byte(result), 0o644); err != nil {
			return 1
		}
		if err := os.Rename(f+".tmp", f+".done"); err != nil {
			return 1
		}
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
