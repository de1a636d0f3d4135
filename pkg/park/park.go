package park

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioringRegisterFiles is IORING_REGISTER_FILES (linux/io_uring.h), which
// golang.org/x/sys does not name.
const ioringRegisterFiles = 2

// paramsSize is sizeof(struct io_uring_params): ten 32-bit fields and the
// SQ and CQ offset blocks of 40 bytes each. Zeroed, it asks for a plain
// ring.
const paramsSize = 120

// Files has the kernel hold files until this process has exited, then
// release them off its exit path, and closes the caller's copies. The
// caller must close every other copy of ours before it exits, so that the
// kernel's reference is the last. On error the files are untouched and
// still the caller's. Each call leaves a ring and its files open until the
// process exits: it is for a process about to exit (a CNI invocation), not
// for a daemon, which would accumulate them.
func Files(files []*os.File) error {
	if len(files) == 0 {
		return nil
	}
	fds := make([]int32, len(files))
	for i, f := range files {
		fd := f.Fd()
		if fd == ^uintptr(0) { // closed: -1 would register an empty slot
			return fmt.Errorf("parking %s: %w", f.Name(), os.ErrClosed)
		}
		fds[i] = int32(fd)
	}
	err := refused()
	if err == nil {
		err = register(fds)
	}
	if err != nil {
		return fmt.Errorf("parking %d files in an io_uring: %w", len(files), err)
	}
	runtime.KeepAlive(files)
	var errs []error
	for _, f := range files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// register makes a ring, registers fds in its file table and leaves the
// ring's descriptor open for the exit to close.
func register(fds []int32) error {
	var params [paramsSize]byte
	ring, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return fmt.Errorf("io_uring_setup: %w", errno)
	}
	_, _, errno = unix.Syscall6(unix.SYS_IO_URING_REGISTER, ring, ioringRegisterFiles,
		uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0)
	if errno != 0 {
		unix.Close(int(ring))
		return fmt.Errorf("io_uring_register: %w", errno)
	}
	return nil
}
