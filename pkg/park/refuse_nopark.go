//go:build nopark

package park

import (
	"fmt"
	"syscall"
)

// refused always refuses in a build tagged nopark, which the bench builds
// to measure parking against the holding child that replaces it.
func refused() error {
	return fmt.Errorf("parking disabled in this build (nopark): %w", syscall.ENOTSUP)
}
