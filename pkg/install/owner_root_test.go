package install

import (
	"os"
	"path/filepath"
	"testing"
)

// A file of another user keeps its owner through a conversion and a
// restore. Only root can give a file to another user, so this test alone
// of the package's needs root; the unit tests keep the test's own owner.
func TestInstallAndUninstallKeepTheOwnerOfAnotherUsersFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user; CI runs as root")
	}
	n := newNode(t)
	n.put(t, "10-bridge.conf", bridgeConf, 0o640)
	if err := os.Chown(filepath.Join(n.conf, "10-bridge.conf"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, n.conf)
	mustInstall(t, n.installer(t))
	if st := snapshot(t, n.conf)["10-bridge.conflist"]; st.Mode.Perm() != 0o640 || st.UID != 1234 || st.GID != 5678 {
		t.Errorf("converted file mode %v owner %d:%d, want the original's 0640 1234:5678", st.Mode, st.UID, st.GID)
	}
	if err := n.installer(t).Uninstall(); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	sameContent(t, "after uninstall", before, snapshot(t, n.conf))
}
