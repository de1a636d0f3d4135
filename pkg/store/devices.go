package store

import (
	"errors"
	"io/fs"
	"os"
)

// Devices names the devices that have a state directory under dataDir;
// none when dataDir does not exist. A symlink is no state directory: it
// is never followed.
func Devices(dataDir string) ([]string, error) {
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errorf(ErrState, "reading dataDir %s: %w", dataDir, err)
	}
	var devs []string
	for _, e := range entries {
		if e.IsDir() {
			devs = append(devs, e.Name())
		}
	}
	return devs, nil
}
