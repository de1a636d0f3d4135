//go:build faultinject

package forget

import "os"

// conntrackStall blocks until the test opens the FIFO for writing.
func conntrackStall() {
	if path := os.Getenv(StallEnv); path != "" {
		if f, err := os.Open(path); err == nil {
			f.Close()
		}
	}
}
