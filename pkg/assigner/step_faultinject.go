//go:build faultinject

package assigner

import (
	"errors"
	"os"
	"syscall"
)

func atStep(step string) {
	if os.Getenv(CrashEnv) == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

func conntrackFault() error {
	if os.Getenv(ConntrackFaultEnv) != "" {
		return errors.New("deleting conntrack entries: operation not permitted (fault injected)")
	}
	return nil
}

// conntrackStall blocks until the test opens the FIFO for writing.
func conntrackStall() {
	if path := os.Getenv(ConntrackStallEnv); path != "" {
		if f, err := os.Open(path); err == nil {
			f.Close()
		}
	}
}
