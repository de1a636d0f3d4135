//go:build faultinject

package steer

import (
	"errors"
	"os"
)

func conntrackFault() error {
	if os.Getenv(ConntrackFaultEnv) != "" {
		return errors.New("deleting conntrack entries: operation not permitted (fault injected)")
	}
	return nil
}
