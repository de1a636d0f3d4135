package netns

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/forget"
)

// A conntrack runner whose dataDir is removed while it deletes a released
// IP's flows (stalled, faultinject, then the directory removed) still
// forgets that the IP had flows: the table's record of them (seen4,
// seen6) would otherwise keep it for good, and a later change would queue
// a clean-up for nothing. With no state left, nobody holds the IP.
func TestARunnerThatLostItsDataDirStillForgetsThatTheReleasedIPsHadFlows(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4, extV6)
	serve(t, a.netns, "a", svPort)
	for _, ext := range []string{extV4, extV6} {
		if _, _, err := ask(t, nsPath(w.h.lan), "tcp", ext, svPort); err != nil {
			t.Fatalf("LAN to %s: %v", ext, err)
		}
	}
	if seen := w.h.seen(); !strings.Contains(seen, extV4) || !strings.Contains(seen, extV6) {
		t.Fatalf("setup: the seen sets do not record the flows to %s and %s:\n%s", extV4, extV6, seen)
	}
	fifo := stallFifo(t)
	w.h.runWith(faultBinary(t), attach("DEL", a.id, w.pluginConf("1.0.0")), forget.StallEnv+"="+fifo).mustOK(t, "DEL of a")
	release := stalled(t, fifo)
	removeAllSettled(t, w.h.dataDir)
	release.Close()
	for deadline := time.Now().Add(5 * time.Second); w.h.cleanUps() > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the clean-up still runs 5 s after it was let go")
		}
	}
	if seen := w.h.seen(); strings.Contains(seen, extV4) || strings.Contains(seen, extV6) {
		t.Errorf("after the runner finished without its dataDir, the seen sets still record the released IPs:\n%s", seen)
	}
}

// removeAllSettled removes dir, and again when a file that the DEL's
// detached processes make meanwhile leaves RemoveAll a directory not
// empty (seen once in make test): gone for good, or a failure within 5 s.
func removeAllSettled(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.RemoveAll(dir)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("removing %s: %v", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seen lists the table's seen sets, which must exist.
func (h *host) seen() string {
	h.t.Helper()
	return h.nft("list set inet external-ip seen4") + h.nft("list set inet external-ip seen6")
}
