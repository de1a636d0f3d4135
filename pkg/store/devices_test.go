package store

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDevicesAreTheDirectoriesOfDataDirAndNoSymlink(t *testing.T) {
	dataDir := t.TempDir()
	elsewhere := t.TempDir()
	for _, err := range []error{
		os.Mkdir(filepath.Join(dataDir, "eip0"), 0o700),
		os.Mkdir(filepath.Join(dataDir, "eip1"), 0o700),
		os.WriteFile(filepath.Join(dataDir, "not-a-device"), nil, 0o600),
		os.Symlink(elsewhere, filepath.Join(dataDir, "planted")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	devs, err := Devices(dataDir)
	slices.Sort(devs)
	if err != nil || !slices.Equal(devs, []string{"eip0", "eip1"}) {
		t.Errorf("Devices = %v, %v; want [eip0 eip1]: a file or a symlink is no state directory", devs, err)
	}
	if devs, err := Devices(filepath.Join(dataDir, "missing")); err != nil || len(devs) != 0 {
		t.Errorf("Devices of a missing dataDir = %v, %v; want none and no error", devs, err)
	}
}
