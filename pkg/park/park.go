package park

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
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

// featuresOffset is where io_uring_params.features lies (after sq_entries,
// cq_entries, flags, sq_thread_cpu and sq_thread_idle).
const featuresOffset = 20

// featCQESkip is IORING_FEAT_CQE_SKIP, first set by Linux 5.17. It stands
// for a kernel recent enough: before about 5.13 to 5.17, registering files
// quiesced the ring, an RCU grace period on the caller's path, the very
// wait parking exists to avoid. Older kernels get the holding child.
const featCQESkip = 1 << 11

// Files has the kernel hold files until this process has exited, then
// release them off its exit path, and closes the caller's copies. The
// caller must close every other copy of ours before it exits, so that the
// kernel's reference is the last. On error the files are untouched and
// still the caller's; once they are parked Files succeeds, whatever the
// closes of our copies say (Linux releases a descriptor even when its close
// reports an error). Each call leaves a ring and its files open until the
// process exits: it is for a process about to exit (a CNI invocation), not
// for a daemon, which would accumulate them.
func Files(files []*os.File) error {
	if len(files) == 0 {
		return nil
	}
	fds, err := descriptors(files)
	if err != nil {
		return err
	}
	err = refused()
	if err == nil {
		err = register(fds)
	}
	if err != nil {
		return fmt.Errorf("parking %d files in an io_uring: %w", len(files), err)
	}
	runtime.KeepAlive(files)
	for _, f := range files {
		f.Close()
	}
	return nil
}

// descriptors are the files' descriptors, each open and given once: -1
// would register an empty slot, and a file given twice would be closed
// twice.
func descriptors(files []*os.File) ([]int32, error) {
	fds := make([]int32, 0, len(files))
	for _, f := range files {
		fd := f.Fd()
		if fd == ^uintptr(0) {
			return nil, fmt.Errorf("parking %s: %w", f.Name(), os.ErrClosed)
		}
		if slices.Contains(fds, int32(fd)) {
			return nil, fmt.Errorf("parking %s: descriptor %d given twice", f.Name(), fd)
		}
		fds = append(fds, int32(fd))
	}
	return fds, nil
}

// register makes a ring, registers fds in its file table and leaves the
// ring's descriptor open for the exit to close.
func register(fds []int32) error {
	var params [paramsSize]byte
	ring, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return fmt.Errorf("io_uring_setup: %w", errno)
	}
	if err := recentEnough(binary.NativeEndian.Uint32(params[featuresOffset:])); err != nil {
		unix.Close(int(ring))
		return err
	}
	_, _, errno = unix.Syscall6(unix.SYS_IO_URING_REGISTER, ring, ioringRegisterFiles,
		uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0)
	if errno != 0 {
		unix.Close(int(ring))
		return fmt.Errorf("io_uring_register: %w", errno)
	}
	return nil
}

// recentEnough refuses a ring whose kernel may quiesce it to register
// files (see featCQESkip).
func recentEnough(features uint32) error {
	if features&featCQESkip == 0 {
		return fmt.Errorf("io_uring features %#x lack IORING_FEAT_CQE_SKIP (Linux 5.17): registering files may wait a grace period: %w", features, syscall.ENOTSUP)
	}
	return nil
}
