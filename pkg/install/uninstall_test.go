package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/logbuf"
)

// primaries are the two shapes a primary comes in.
var primaries = map[string]struct{ file, data string }{
	"conflist":    {"10-bridge.conflist", bridgeList},
	"single conf": {"10-bridge.conf", bridgeConf},
}

func TestUninstallRestoresTheConfDirByteForByteAndRemovesTheBinary(t *testing.T) {
	for name, p := range primaries {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			n.put(t, p.file, p.data, 0o600)
			n.put(t, "20-other.conflist", bridgeList, 0o644)
			before := snapshot(t, n.conf)
			in := n.installer(t)
			mustInstall(t, in)
			if err := in.Uninstall(); err != nil {
				t.Fatalf("uninstall: %v", err)
			}
			sameContent(t, "conf dir after uninstall", before, snapshot(t, n.conf))
			if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); !os.IsNotExist(err) {
				t.Errorf("binary still there after uninstall (%v)", err)
			}
			if err := in.Uninstall(); err != nil {
				t.Errorf("a second uninstall: %v; want nothing to do", err)
			}
		})
	}
}

// A binary that was there before our first install (a package's) is
// overwritten by it, and put back by uninstall byte for byte, with its
// mode and mtime, through upgrades of ours in between: the undo directory
// keeps a copy. One that someone else put in place of ours since is
// theirs, and stays.
func TestUninstallPutsBackTheBinaryThatWasThereBeforeTheFirstInstall(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		t.Run(fmt.Sprintf("ours replaced since: %v", replaced), func(t *testing.T) {
			n := newNode(t)
			n.put(t, "10-bridge.conflist", bridgeList, 0o644)
			bin := filepath.Join(n.bin, BinaryName)
			writeFile(t, bin, "#!/bin/sh\n# the package's external-ip\n", 0o750)
			old := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
			if err := os.Chtimes(bin, old, old); err != nil {
				t.Fatal(err)
			}
			want := snapshot(t, n.bin)
			in := n.installer(t)
			mustInstall(t, in)
			writeFile(t, n.exe, "#!/bin/sh\n# the plugin binary, version 3\n", 0o755)
			if res := mustInstall(t, in); !res.Binary {
				t.Fatalf("the upgrade did not write the new binary: %s", describe(res))
			}
			if replaced {
				writeFile(t, bin, "#!/bin/sh\n# someone else's, since\n", 0o755)
				want = snapshot(t, n.bin)
			}
			if err := in.Uninstall(); err != nil {
				t.Fatal(err)
			}
			sameContent(t, "bin dir after uninstall", want, snapshot(t, n.bin))
			if _, err := os.Lstat(filepath.Join(n.conf, undoDir)); !os.IsNotExist(err) {
				t.Errorf("the undo directory, with the copy of the binary, is still there (%v)", err)
			}
		})
	}
}

func TestUninstallAfterThePrimaryRewroteItsFileRestoresThePrimarysVersion(t *testing.T) {
	for name, p := range primaries {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			n.put(t, p.file, p.data, 0o644)
			in := n.installer(t)
			mustInstall(t, in)
			// The primary restarts and writes its file anew, as it knows it.
			newer := strings.ReplaceAll(p.data, "cni0", "cni1")
			n.put(t, p.file, newer, 0o644)
			want := snapshot(t, n.conf)
			delete(want, listName(p.file)) // ours, to go
			delete(want, undoDir)
			mustInstall(t, in) // chains the new version (a .conf: converts it again)
			if err := in.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if p.file == listName(p.file) {
				want[p.file] = snapshot(t, n.conf)[p.file] // mtime is the rewrite's
			}
			got := snapshot(t, n.conf)
			if got[p.file].Data != newer {
				t.Errorf("uninstall restored\n%s\nwant the primary's latest version\n%s", got[p.file].Data, newer)
			}
			sameContent(t, "conf dir", want, got)
		})
	}
}

func TestUninstallRemovesOnlyOurEntryFromAFileSomeoneElseRewroteWithIt(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	mustInstall(t, in)
	// Another tool re-indents the file and adds a plugin, keeping ours.
	data := strings.Replace(string(n.read(t, "10-bridge.conflist")), `"plugins": [`, `"plugins": [{"type": "tuning"},`, 1)
	n.put(t, "10-bridge.conflist", data, 0o644)
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	got := pluginTypes(t, n.read(t, "10-bridge.conflist"))
	if !slices.Equal(got, []string{"tuning", "bridge", "portmap"}) {
		t.Errorf("plugins after uninstall = %v; want the other tool's list without our entry", got)
	}
}

func TestUninstallLeavesAFileSomeoneElseReplacedWithoutOurEntry(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	mustInstall(t, in)
	theirs := strings.ReplaceAll(bridgeList, "cni0", "br-theirs")
	n.put(t, "10-bridge.conflist", theirs, 0o644)
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := string(n.read(t, "10-bridge.conflist")); got != theirs {
		t.Errorf("uninstall overwrote a newer file of someone else's:\n%s", got)
	}
}

// A binary someone else put in place of ours since we wrote it (a package,
// an operator) is theirs, as a config file is: uninstall leaves it. One we
// wrote in an upgrade is still ours.
func TestUninstallLeavesABinarySomeoneElseReplacedOursWith(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	mustInstall(t, in)
	writeFile(t, n.exe, "#!/bin/sh\n# the plugin binary, version 3\n", 0o755)
	if res := mustInstall(t, in); !res.Binary {
		t.Fatalf("the upgrade did not write the new binary: %s", describe(res))
	}
	bin := filepath.Join(n.bin, BinaryName)
	writeFile(t, bin, "#!/bin/sh\n# someone else's external-ip\n", 0o755)
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(bin); err != nil || !strings.Contains(string(b), "someone else's") {
		t.Errorf("uninstall removed or changed a binary someone else put there (%q, %v)", b, err)
	}
}

// Without the undo file and with no entry of ours chained, nothing says an
// install of ours put the binary there (a package's, kept by an earlier
// uninstall): a second uninstall leaves it, even when it is this build.
func TestUninstallWithoutUndoAndWithoutOurEntryLeavesTheBinary(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	exe, _ := os.ReadFile(n.exe)
	writeFile(t, filepath.Join(n.bin, BinaryName), string(exe), 0o755) // there before us
	in := n.installer(t)
	mustInstall(t, in)
	for k := range 2 {
		if err := in.Uninstall(); err != nil {
			t.Fatalf("uninstall %d: %v", k+1, err)
		}
		if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); err != nil {
			t.Fatalf("after uninstall %d the binary that was there before the install is gone (%v)", k+1, err)
		}
	}
}

// An uninstall while a watcher still runs (a plain `kubectl delete`, whose
// pod is still terminating) restores the conf dir but keeps the binary and
// says to run it again: the advice names a binary that is there. Run as
// advised once the watcher has stopped, uninstall finishes: binary, undo
// file and mark gone, the conf dir as before the first install.
func TestUninstallWhileAWatcherRunsKeepsTheBinaryItAdvisesRunningAgain(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	before := snapshot(t, n.conf)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.installer(t).Watch(ctx, WatchOptions{Resync: time.Hour}) }()
	defer stop()
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))

	logs := &logbuf.Buffer{}
	in := &Installer{BinDir: n.bin, ConfDir: n.conf, Log: logs.Logger()}
	if err := in.Uninstall(); err != nil {
		t.Fatalf("uninstall beside a running watcher: %v", err)
	}
	bin := filepath.Join(n.bin, BinaryName)
	advice := fmt.Sprintf("run %s uninstall --bin-dir %s --conf-dir %s to finish", bin, n.bin, n.conf)
	if !strings.Contains(logs.String(), advice) || !strings.Contains(logs.String(), "install --watch is still running") {
		t.Errorf("uninstall's lines:\n%s\nwant the watcher named and the advice %q", logs, advice)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("the binary the advice runs: %v, %v; want it kept, executable", fi, err)
	}
	if got := n.read(t, "10-bridge.conflist"); string(got) != bridgeList {
		t.Errorf("the primary was not restored while the watcher runs:\n%s", got)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("watch: %v", err)
	}
	if err := in.Uninstall(); err != nil { // what the advised command runs
		t.Fatalf("uninstall run again as advised: %v", err)
	}
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("the binary is still there after the advised run (%v)", err)
	}
	sameContent(t, "conf dir after the advised run", before, snapshot(t, n.conf))
}
