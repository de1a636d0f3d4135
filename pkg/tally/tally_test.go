package tally

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func fold(t *testing.T, f *Folder) map[Key]uint64 {
	t.Helper()
	got, err := f.Fold()
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	return got
}

func TestRecordCountsNothingUntilAFolderCreatesTheFile(t *testing.T) {
	dir := t.TempDir()
	Record(dir, "ADD", 0)
	if _, err := os.Lstat(filepath.Join(dir, FileName)); !os.IsNotExist(err) {
		t.Fatalf("the plugin created %s (%v); only a Folder may, or it grows on nodes where nobody folds", FileName, err)
	}
	f := NewFolder(dir)
	defer f.Close()
	if got := fold(t, f); len(got) != 0 {
		t.Fatalf("a fresh folder counts %v", got)
	}
	st, err := os.Lstat(filepath.Join(dir, FileName))
	if err != nil || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
		t.Fatalf("the folder's file: %v, %v; want a regular file 0600", st, err)
	}
	Record(dir, "ADD", 0)
	Record(dir, "ADD", 7)
	Record(dir, "DEL", 0)
	Record(dir, "ADD", 0)
	got := fold(t, f)
	want := map[Key]uint64{{"ADD", 0}: 2, {"ADD", 7}: 1, {"DEL", 0}: 1}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if got := fold(t, f); got[Key{"ADD", 0}] != 2 {
		t.Errorf("a second fold with nothing new changed ADD 0 to %d", got[Key{"ADD", 0}])
	}
}

func TestConcurrentRecordsAreAllCounted(t *testing.T) {
	dir := t.TempDir()
	f := NewFolder(dir)
	defer f.Close()
	fold(t, f)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 250 {
				Record(dir, "CHECK", 104)
			}
		})
	}
	wg.Wait()
	if got := fold(t, f)[Key{"CHECK", 104}]; got != 2000 {
		t.Errorf("8 writers of 250 lines each: counted %d, want 2000", got)
	}
}

func TestALineNotYetWholeIsCountedOnceItIs(t *testing.T) {
	dir := t.TempDir()
	f := NewFolder(dir)
	defer f.Close()
	fold(t, f)
	appendTo(t, filepath.Join(dir, FileName), "GC 0\nADD")
	if got := fold(t, f); got[Key{"GC", 0}] != 1 || got[Key{"ADD", 0}] != 0 {
		t.Fatalf("after a line and a half: %v", got)
	}
	appendTo(t, filepath.Join(dir, FileName), " 0\nbogus 1\nADD x\n")
	if got := fold(t, f); got[Key{"ADD", 0}] != 1 || len(got) != 2 {
		t.Errorf("the half line completed, then junk: %v; want ADD 0 once and junk skipped", got)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = w.WriteString(s)
		w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A write by an invocation that opened the file just before the folder
// replaced it still counts: the old file is drained at the next fold.
func TestRotationLosesNoLine(t *testing.T) {
	dir := t.TempDir()
	f := NewFolder(dir)
	defer f.Close()
	f.max = 64
	fold(t, f)
	for range 20 {
		Record(dir, "ADD", 0)
	}
	late, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fold(t, f) // past max: replaced
	late.WriteString("DEL 0\n")
	late.Close()
	Record(dir, "ADD", 0)
	got := fold(t, f)
	if got[Key{"ADD", 0}] != 21 || got[Key{"DEL", 0}] != 1 {
		t.Errorf("across a rotation: %v; want ADD 0 21 times and the late DEL 0 once", got)
	}
	if st, err := os.Stat(filepath.Join(dir, FileName)); err != nil || st.Size() != 6 {
		t.Errorf("the file after rotation: %v, %v; want the one new line", st, err)
	}
}

func TestNeitherSideFollowsASymlinkOrBlocksOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
	Record(dir, "ADD", 0)
	if b, _ := os.ReadFile(outside); string(b) != "keep\n" {
		t.Errorf("Record wrote through a symlink: the file outside now holds %q", b)
	}
	f := NewFolder(dir)
	defer f.Close()
	if _, err := f.Fold(); err == nil {
		t.Errorf("the folder read through a symlink without an error")
	}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { Record(dir, "ADD", 0); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Record blocked on a FIFO with no reader")
	}
	if _, err := f.Fold(); err == nil {
		t.Errorf("the folder took a FIFO for its file")
	}
}

func TestAMissingDataDirIsNoError(t *testing.T) {
	f := NewFolder(filepath.Join(t.TempDir(), "none"))
	defer f.Close()
	if got, err := f.Fold(); err != nil || len(got) != 0 {
		t.Errorf("fold of a missing dataDir: %v, %v", got, err)
	}
}

// On a fresh node the dataDir appears with the first call: the node
// process makes it, or that call would go uncounted.
func TestAFolderThatMakesTheDataDirCountsTheFirstCall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "external-ip")
	f := NewFolder(dir)
	f.MakeDir = true
	defer f.Close()
	fold(t, f)
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the dataDir after the first fold: %v, %v; want a directory 0700", st, err)
	}
	Record(dir, "ADD", 0)
	if got := fold(t, f); got[Key{"ADD", 0}] != 1 {
		t.Errorf("the first call on a fresh node: counted %v", got)
	}
}

func BenchmarkRecord(b *testing.B) {
	dir := b.TempDir()
	f := NewFolder(dir)
	defer f.Close()
	f.Fold()
	for b.Loop() {
		Record(dir, "ADD", 0)
	}
}
