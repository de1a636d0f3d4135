package install

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// primaryWrites plays the primary CNI rewriting its file, by rename as
// writers of CNI configs do, each time our write of name is staged: in the
// window between our plan and our rename. It stops after times writes
// (negative: never) and returns the last version written.
func primaryWrites(t *testing.T, n *node, name string, times int, version func(k int) string) (atomicfile.Fault, *string) {
	t.Helper()
	last := new(string)
	k := 0
	return func(point string) {
		if point != "stage "+name || (times >= 0 && k >= times) {
			return
		}
		k++
		*last = version(k)
		tmp := filepath.Join(n.conf, ".primary-new")
		writeFile(t, tmp, *last, 0o644)
		if err := os.Rename(tmp, filepath.Join(n.conf, name)); err != nil {
			t.Fatal(err)
		}
	}, last
}

// A primary that rewrites its list while we chain it (at node boot, in a
// primary CNI upgrade) keeps its new version: we chain into that one, and
// uninstall restores that one, never the older one we had read.
func TestInstallChainsThePrimarysVersionWrittenWhileItWasChaining(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	newer := strings.ReplaceAll(bridgeList, "10.88.0.0/16", "10.99.0.0/16")
	in := n.installer(t)
	in.fault, _ = primaryWrites(t, n, "10-pods.conflist", 1, func(int) string { return newer })
	for k := range 2 {
		if _, err := in.Install(); err != nil {
			t.Fatalf("install %d: %v", k+1, err)
		}
	}
	got := string(n.read(t, "10-pods.conflist"))
	if !strings.Contains(got, "10.99.0.0/16") {
		t.Errorf("after two installs the primary's newer version (10.99.0.0/16) is lost:\n%s", got)
	}
	if types := pluginTypes(t, []byte(got)); !slices.Equal(types, []string{"bridge", "portmap", "external-ip"}) {
		t.Errorf("plugins = %v; want our entry chained into the newer version", types)
	}
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := string(n.read(t, "10-pods.conflist")); got != newer {
		t.Errorf("uninstall restored\n%s\nwant the version we chained from, byte for byte:\n%s", got, newer)
	}
}

// A conversion checks the single-plugin file too before it removes it: a
// rewrite of the .conf while its .conflist was being written is chained,
// not deleted.
func TestInstallDoesNotRemoveAConfThePrimaryRewroteWhileItWasConverted(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conf", bridgeConf, 0o644)
	newer := strings.ReplaceAll(bridgeConf, "10.88.0.0/16", "10.99.0.0/16")
	in := n.installer(t)
	in.fault = func(point string) {
		if point == "stage 10-bridge.conflist" && !strings.Contains(string(n.read(t, "10-bridge.conf")), "10.99") {
			writeFile(t, filepath.Join(n.conf, "10-bridge.conf"), newer, 0o644)
		}
	}
	mustInstall(t, in)
	if _, err := os.Stat(filepath.Join(n.conf, "10-bridge.conf")); !os.IsNotExist(err) {
		t.Errorf("10-bridge.conf still there (%v): the runtime would read it, without us", err)
	}
	if got := string(n.read(t, "10-bridge.conflist")); !strings.Contains(got, "10.99.0.0/16") {
		t.Errorf("the primary's rewrite of its .conf is lost:\n%s", got)
	}
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := string(n.read(t, "10-bridge.conf")); got != newer {
		t.Errorf("uninstall restored\n%s\nwant the version we converted:\n%s", got, newer)
	}
}

// A primary that rewrites its file at every try makes Install fail naming
// the file, with the primary's last version in place and not ours; the
// watch's next pass tries again.
func TestInstallGivesUpNamingTheFileWhenThePrimaryKeepsRewritingIt(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	in := n.installer(t)
	var last *string
	in.fault, last = primaryWrites(t, n, "10-pods.conflist", -1, func(k int) string {
		return strings.ReplaceAll(bridgeList, "cni0", "cni"+strings.Repeat("x", k))
	})
	_, err := in.Install()
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), filepath.Join(n.conf, "10-pods.conflist")) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("install against a primary rewriting at every try: %v; want one line of kind ErrChanged naming the file", err)
	}
	if got := string(n.read(t, "10-pods.conflist")); got != *last {
		t.Errorf("the file is\n%s\nwant the primary's last version\n%s", got, *last)
	}
	in.fault = nil
	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := string(n.read(t, "10-pods.conflist")); got != *last {
		t.Errorf("uninstall put back\n%s\nwant the primary's last version left as it is", got)
	}
}

// Uninstall, too, restores only over the bytes it judged: a primary that
// rewrites its file meanwhile keeps its version, and the run fails saying
// so; the next run leaves that version alone.
func TestUninstallKeepsThePrimarysVersionWrittenWhileItRestored(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	in := n.installer(t)
	mustInstall(t, in)
	newer := strings.ReplaceAll(bridgeList, "10.88.0.0/16", "10.99.0.0/16")
	in.fault, _ = primaryWrites(t, n, "10-pods.conflist", 1, func(int) string { return newer })
	if err := in.Uninstall(); !errors.Is(err, ErrChanged) {
		t.Errorf("uninstall while the primary rewrote its file: %v; want ErrChanged", err)
	}
	if err := in.Uninstall(); err != nil {
		t.Fatalf("uninstall again: %v", err)
	}
	if got := string(n.read(t, "10-pods.conflist")); got != newer {
		t.Errorf("after uninstall the file is\n%s\nwant the primary's newer version\n%s", got, newer)
	}
}
