//go:build faultinject

package assigner

import (
	"os"
	"syscall"
)

// CrashEnv names the step at which a faultinject build kills itself with
// SIGKILL, as a crash or an impatient runtime would.
const CrashEnv = "EXTERNAL_IP_CRASH_AT"

func stepHook(step string) {
	if os.Getenv(CrashEnv) == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
