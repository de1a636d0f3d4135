package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Under a sticky world-writable directory (accepted, as /tmp is) another
// user may make the missing directory on the way to dataDir between the
// check and its creation: the state must not then be kept in their tree.
func TestADirectoryAnotherUserMakesOnTheWayFirstIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user (nobody); CI runs as root")
	}
	const nobody = 65534
	base := t.TempDir()
	if err := os.Chmod(base, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(base, "x")
	dataDir := filepath.Join(theirs, "data")
	s := New(dataDir, "eip0")
	s.beforeMkdir = func(string) {
		if err := errors.Join(os.Mkdir(theirs, 0o755), os.Chown(theirs, nobody, nobody)); err != nil {
			t.Error(err)
		}
	}
	l, err := s.Lock(MakeAll, time.Second)
	if l != nil {
		l.Unlock()
	}
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), theirs) {
		t.Errorf("Lock = %v, want ErrRefused naming %s, which another user made", err, theirs)
	}
	if entries, err := os.ReadDir(dataDir); len(entries) > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
		t.Errorf("state was kept under %s, another user's directory: %v %v", theirs, entries, err)
	}
}
