//go:build nopark

package sink

import (
	"fmt"
	"syscall"
)

// refused always refuses in a build tagged nopark, which the bench builds
// to measure the holding child that parking and the sink replace.
func refused() error {
	return fmt.Errorf("the sink is disabled in this build (nopark): %w", syscall.ENOTSUP)
}
