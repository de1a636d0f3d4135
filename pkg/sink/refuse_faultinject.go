//go:build faultinject && !nopark

package sink

import (
	"fmt"
	"os"
)

// refused says no sink runs when RefuseEnv is set.
func refused() error {
	if os.Getenv(RefuseEnv) != "" {
		return fmt.Errorf("%w (%s)", ErrAbsent, RefuseEnv)
	}
	return nil
}
