package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The node lock excludes a second holder, of any dataDir, until it is
// released, and is made in a directory of mode 0700.
func TestTheNodeLockExcludesASecondHolderUntilReleased(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "external-ip")
	l, err := LockNode(dir, time.Second)
	if err != nil {
		t.Fatalf("LockNode in a fresh directory: %v", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the node lock's directory: %v, %v; want it made 0700", st, err)
	}
	if l2, err := LockNode(dir, 100*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		if l2 != nil {
			l2.Unlock()
		}
		t.Fatalf("a second LockNode while the first holds it: %v, want ErrLockTimeout", err)
	}
	l.Unlock()
	l2, err := LockNode(dir, time.Second)
	if err != nil {
		t.Fatalf("LockNode once released: %v", err)
	}
	l2.Unlock()
}

// Neither the node lock's directory nor its file is reached through a
// symlink, and a directory others may write to is refused: another user
// could hold the lock, or point it at a file of the system's. Nothing is
// made where a symlink points.
func TestTheNodeLockIsNeverTakenThroughASymlinkOrWhereOthersCanWrite(t *testing.T) {
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, dir, elsewhere string)
		kind  error
	}{
		{"the directory a symlink", func(t *testing.T, dir, elsewhere string) {
			must(t, os.Symlink(elsewhere, dir))
		}, ErrState},
		{"the lock a symlink", func(t *testing.T, dir, elsewhere string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.Symlink(filepath.Join(elsewhere, "planted"), filepath.Join(dir, "node.lock")))
		}, ErrState},
		{"the directory writable by others", func(t *testing.T, dir, _ string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.Chmod(dir, 0o777))
		}, ErrRefused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir, elsewhere := filepath.Join(root, "external-ip"), filepath.Join(root, "elsewhere")
			must(t, os.Mkdir(elsewhere, 0o700))
			tt.plant(t, dir, elsewhere)
			l, err := LockNode(dir, 100*time.Millisecond)
			if l != nil {
				l.Unlock()
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("LockNode = %v, want an error of kind %v", err, tt.kind)
			}
			if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
				t.Errorf("LockNode made %s in the directory a symlink points to", entries[0].Name())
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
