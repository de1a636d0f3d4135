package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWriteKeepsModeAndMtimeAndACheckThatFailsLeavesTheFileAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := Write(dir, "a.conflist", []byte("one"), Meta{Mode: 0o640, UID: os.Getuid(), GID: os.Getgid(), MTime: mtime}, nil); err != nil {
		t.Fatal(err)
	}
	data, meta, err := ReadRegular(dir, "a.conflist")
	if err != nil || string(data) != "one" || meta.Mode != 0o640 || !meta.MTime.Equal(mtime) {
		t.Fatalf("read back %q %+v %v; want one, 0640, %s", data, meta, err, mtime)
	}
	changed := errors.New("changed meanwhile")
	err = WriteChecked(dir, "a.conflist", []byte("two"), *meta, nil, func() error { return changed })
	if !errors.Is(err, changed) {
		t.Errorf("a failed check: %v; want its error", err)
	}
	if data, _, _ := ReadRegular(dir, "a.conflist"); string(data) != "one" {
		t.Errorf("a failed check replaced the file with %q", data)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, TempPattern)); len(left) > 0 {
		t.Errorf("a failed check left temp files: %v", left)
	}
}

func TestReadRegularRefusesASymlinkAndAFifoAndTakesAMissingFileAsNone(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "target"), []byte("x"), 0o644)
	os.Symlink("target", filepath.Join(dir, "link"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"link": "symlink", "fifo": "a named pipe"} {
		if _, _, err := ReadRegular(dir, name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("reading %s: %v; want a refusal naming %s", name, err, want)
		}
	}
	if data, meta, err := ReadRegular(dir, "missing"); data != nil || meta != nil || err != nil {
		t.Errorf("a missing file: %q %v %v; want nothing and no error", data, meta, err)
	}
}

func TestSweepTempsRemovesOnlyTheTempFilesAKilledWriteLeaves(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".external-ip-123.tmp", ".external-ip-x.conflist", "10-a.conflist", ".other-1.tmp"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	if err := SweepTemps(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != ".external-ip-x.conflist .other-1.tmp 10-a.conflist" {
		t.Errorf("left %v; want all but our temp file", left)
	}
}
