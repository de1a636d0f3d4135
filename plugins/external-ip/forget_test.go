package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A clean-up child ends, promptly and without error, when its state
// directory is gone (removed after the DEL, or never made): there is
// nothing to drain, and it makes nothing. The job has no "runner", as one
// from a binary of before the runner lock: the child takes the lock
// itself rather than a descriptor 3 it did not inherit.
func TestACleanUpChildEndsWhenItsStateIsGone(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone")
	start := time.Now()
	if code := runForget(fmt.Sprintf(`{"dataDir":%q,"device":"eip0"}`, gone)); code != 0 {
		t.Errorf("the clean-up child exits %d with no state, want 0", code)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the clean-up child took %v with no state, want it gone at once", d)
	}
	if _, err := os.Stat(gone); err == nil {
		t.Error("the clean-up child made the state directory")
	}
}
