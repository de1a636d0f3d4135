// Package fullfs is test support for the tests of a full state filesystem
// (pkg/assigner and test/netns): a tiny tmpfs, filled but for a number of
// pages. It needs root, and is imported only by tests.
package fullfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Mount mounts a 64 KiB tmpfs at dir, mode 0700, and fills it but for
// pages pages: each small state file takes one. Free gives the room back;
// the test's cleanup unmounts it.
func Mount(t testing.TB, dir string, pages int) (free func()) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs at %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	n := 0
	for ; ; n++ {
		if _, err := f.Write(page); err != nil {
			break
		}
	}
	if err := errors.Join(f.Truncate(int64((n-pages)*len(page))), f.Close()); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Truncate(filler, 0); err != nil {
			t.Fatal(err)
		}
	}
}
