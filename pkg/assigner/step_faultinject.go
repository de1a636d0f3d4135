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
}

// conntrackStall blocks until the test opens the FIFO for writing.
func conntrackStall() {
	if path := os.Getenv(ConntrackStallEnv); path != "" {
		if f, err := os.Open(path); err == nil {
			f.Close()
		}
	}
}
