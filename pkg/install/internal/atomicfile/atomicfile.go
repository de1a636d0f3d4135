package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TempPattern names our staged files. The runtime lists only .conf,
// .conflist and .json files, so a temp file left by a kill is never read as
// a network config; the next install or uninstall sweeps it (SweepTemps).
const (
	tempPrefix  = ".external-ip-"
	TempPattern = tempPrefix + "*.tmp"
)

// Meta is what a rewrite keeps of the file it replaces.
type Meta struct {
	Mode fs.FileMode `json:"mode"`
	UID  int         `json:"uid"`
	GID  int         `json:"gid"`
	// MTime, when set, is given to the staged file before the rename, so
	// that a restore puts content and mtime back in one step.
	MTime time.Time `json:"mtime"`
}

// Fault is called at every point where a kill would leave a different
// state on disk; tests kill the process there. Production leaves it nil.
type Fault func(point string)

// At calls f, if any, at point.
func (f Fault) At(point string) {
	if f != nil {
		f(point)
	}
}

// Write replaces dir/name with data: a temp file in dir, the mode and
// owner of meta, fsync, rename, fsync of dir. A reader (or a runtime
// executing the old binary) sees the old file or the new one, never part.
func Write(dir, name string, data []byte, meta Meta, fault Fault) error {
	return WriteChecked(dir, name, data, meta, fault, nil)
}

// WriteChecked is Write that calls check (nil: none) last before the
// rename, after the fsync: a check that fails leaves dir/name as it is and
// returns check's error.
func WriteChecked(dir, name string, data []byte, meta Meta, fault Fault, check func() error) error {
	f, err := os.CreateTemp(dir, TempPattern)
	if err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Join(dir, name), err)
	}
	tmp := f.Name()
	err = stage(f, data, meta)
	if err == nil && !meta.MTime.IsZero() {
		err = os.Chtimes(tmp, meta.MTime, meta.MTime)
	}
	if err == nil {
		fault.At("stage " + name)
		if check != nil {
			if err := check(); err != nil {
				os.Remove(tmp)
				return err
			}
		}
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", filepath.Join(dir, name), err)
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	fault.At("write " + name)
	return nil
}

func stage(f *os.File, data []byte, meta Meta) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(meta.Mode.Perm())
	}
	if err == nil && (meta.UID != os.Getuid() || meta.GID != os.Getgid()) {
		err = f.Chown(meta.UID, meta.GID)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove removes dir/name; a file already gone is what we wanted.
func Remove(dir, name string, fault Fault) error {
	return RemoveChecked(dir, name, fault, nil)
}

// RemoveChecked is Remove that calls check (nil: none) first: a check
// that fails leaves dir/name as it is and returns check's error.
func RemoveChecked(dir, name string, fault Fault, check func() error) error {
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing %s: %w", filepath.Join(dir, name), err)
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	fault.At("remove " + name)
	return nil
}

// SyncDir fsyncs dir, so that a rename or removal in it lasts a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// SweepTemps removes the temp files a killed write left in dir.
func SweepTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), tempPrefix) && strings.HasSuffix(e.Name(), ".tmp") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing stale %s: %w", filepath.Join(dir, e.Name()), err)
			}
		}
	}
	return nil
}

// ReadRegular reads dir/name, refusing a symlink or anything but a regular
// file: we never follow a link out of the directory we own a file in.
// A missing file is (nil, nil, nil).
func ReadRegular(dir, name string) ([]byte, *Meta, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case os.IsNotExist(err):
		return nil, nil, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, nil, fmt.Errorf("%s: is a symlink; refusing to follow or replace it", path)
	case err != nil:
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: is %s, not a regular file; refusing to replace it", path, KindOf(fi.Mode()))
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, metaOf(fi), nil
}

// LockDir takes an exclusive flock(2) on dir itself, so that two installers
// (a DaemonSet's old and new pod during a surge, or a person running
// uninstall) never interleave their undo records. No lock file is needed,
// and the kernel drops the lock when a holder dies.
func LockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { d.Close() }, nil
}

// KindOf names what a file that is not a regular one is, for a refusal.
func KindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "of another kind"
}
