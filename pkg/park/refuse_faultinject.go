//go:build faultinject && !nopark

package park

import (
	"os"
	"syscall"
)

// refused is io_uring_setup's answer where io_uring is disabled, when
// RefuseEnv is set.
func refused() error {
	if os.Getenv(RefuseEnv) != "" {
		return syscall.EPERM
	}
	return nil
}
