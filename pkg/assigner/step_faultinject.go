//go:build faultinject

package assigner

import (
	"os"
	"syscall"
)

func atStep(step string) {
	if os.Getenv(CrashEnv) == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if os.Getenv(PauseEnv) == step {
		os.Unsetenv(PauseEnv) // once: an undo passes the step again
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}
