package install

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/store"
	"golang.org/x/sys/unix"
)

// inState runs f on device's state under dataDir, under its lock, as a
// plugin call does.
func inState(t *testing.T, dataDir, device string, f func(*store.Store) error) {
	t.Helper()
	s := store.New(dataDir, device)
	l, err := s.Lock(store.MakeAll, 5*time.Second)
	if err != nil || l == nil {
		t.Fatalf("locking the state of %s: %v", device, err)
	}
	defer l.Unlock()
	if err := f(s); err != nil {
		t.Fatal(err)
	}
}

// holds records that a pod's attachment holds ip on device, as its ADD
// does; the returned func removes it, as its DEL does.
func holds(t *testing.T, dataDir, device, pod string, ip netip.Addr) (del func()) {
	t.Helper()
	a := store.Attachment{Network: "pods", ContainerID: pod, IfName: "eth0"}
	inState(t, dataDir, device, func(s *store.Store) error {
		return s.WriteRecord(a.Key(), &store.Record{Attachment: a, IPs: []netip.Addr{ip}})
	})
	return func() {
		inState(t, dataDir, device, func(s *store.Store) error { return s.RemoveRecord(a.Key()) })
	}
}

// installedWithState is a node with our entry chained into its primary,
// and a state dir for uninstall to look at; before is the conf dir as it
// was before the install.
func installedWithState(t *testing.T) (n *node, in *Installer, before map[string]fileState) {
	t.Helper()
	n = newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	before = snapshot(t, n.conf)
	in = n.installer(t)
	in.DataDir = filepath.Join(t.TempDir(), "state")
	mustInstall(t, in)
	return n, in, before
}

// On containerd a pod's DEL runs the networks loaded now, not those the
// pod was created with: uninstall keeps our entry chained while pods hold
// external IPs (else their DELs never reach us and the IPs leak), changes
// nothing, says what is held and what to do, and fails. Once the DELs
// have run, it restores the conf dir and finishes.
func TestUninstallKeepsOurEntryChainedWhilePodsHoldExternalIPs(t *testing.T) {
	n, in, before := installedWithState(t)
	chained := snapshot(t, n.conf)
	del := holds(t, in.DataDir, "eip0", "pod-a", netip.MustParseAddr("192.0.2.7"))

	err := in.Uninstall()
	if !errors.Is(err, ErrHeld) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "eip0") || !strings.Contains(err.Error(), "1 attachments") ||
		!strings.Contains(err.Error(), "delete those pods, then run "+filepath.Join(n.bin, BinaryName)+" uninstall --bin-dir "+n.bin+" --conf-dir "+n.conf+" --data-dir "+in.DataDir+" again") {
		t.Fatalf("uninstall while a pod holds an IP: %v; want one line of ErrHeld naming the holder, the count and what to do", err)
	}
	t.Logf("the refusal: %v", err)
	sameContent(t, "conf dir after the refused uninstall", chained, snapshot(t, n.conf))
	if got := pluginTypes(t, n.read(t, "10-pods.conflist")); !slices.Contains(got, PluginType) {
		t.Errorf("plugins = %v: our entry is gone, so the pod's DEL would not reach us", got)
	}
	if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); err != nil {
		t.Errorf("the binary the pod's DEL runs is gone: %v", err)
	}
	if err := in.Check(); err != nil {
		t.Errorf("check after the refused uninstall: %v; want everything still in place", err)
	}

	del()
	if err := in.Uninstall(); err != nil {
		t.Fatalf("uninstall once the DEL ran: %v", err)
	}
	sameContent(t, "conf dir after uninstall", before, snapshot(t, n.conf))
	if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); !os.IsNotExist(err) {
		t.Errorf("binary still there after uninstall (%v)", err)
	}
}

// An interrupted change (a killed ADD may have taken an IP) counts as held:
// uninstall refuses, naming it and its remedy.
func TestUninstallRefusesWhileAnInterruptedChangeIsPending(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	in := n.installer(t)
	in.DataDir = filepath.Join(t.TempDir(), "state")
	mustInstall(t, in)
	inState(t, in.DataDir, "eip0", func(s *store.Store) error { return s.Write(store.JournalFile, &store.Journal{}) })
	chained := snapshot(t, n.conf)
	err := in.Uninstall()
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "interrupted change") || !strings.Contains(err.Error(), "external-ip repair") {
		t.Fatalf("uninstall with a journal pending: %v; want ErrHeld naming the interrupted change and external-ip repair", err)
	}
	sameContent(t, "conf dir after the refused uninstall", chained, snapshot(t, n.conf))
}

// netnsAt is a record's namespace at path, as an ADD records it: the
// device and inode of its directory (and of the path, when it exists).
func netnsAt(t *testing.T, path string) *store.Netns {
	t.Helper()
	var dir, st unix.Stat_t
	if err := unix.Stat(filepath.Dir(path), &dir); err != nil {
		t.Fatal(err)
	}
	ns := &store.Netns{Path: path, DirDev: dir.Dev, DirIno: dir.Ino}
	if unix.Stat(path, &st) == nil {
		ns.Dev, ns.Ino = st.Dev, st.Ino
	}
	return ns
}

// Only a namespace provably gone lets uninstall release a record: one the
// ADD did not record, one whose path is there but no namespace this
// process can see, and one in a directory that is not the ADD's count as
// a live pod's.
func TestOnlyARecordWhoseNamespaceIsProvablyGoneIsTakenForAGonePod(t *testing.T) {
	dir := t.TempDir()
	there := filepath.Join(dir, "bind-mount-not-seen")
	writeFile(t, there, "", 0o644)
	gone := netnsAt(t, filepath.Join(dir, "deleted"))
	otherDir := *gone
	otherDir.DirIno++
	for name, tc := range map[string]struct {
		ns   *store.Netns
		gone bool
	}{
		"none recorded":            {nil, false},
		"its path gone":            {gone, true},
		"a file that is no netns":  {netnsAt(t, there), false},
		"another directory's path": {&otherDir, false},
	} {
		if got := containerGone("", &store.Record{Netns: tc.ns}); got != tc.gone {
			t.Errorf("%s: taken for gone: %v, want %v", name, got, tc.gone)
		}
	}
}

// A pod whose namespace is still there holds uninstall up; --force
// restores all the same, and says for the IP it leaves held how to release
// it: uninstall again once the pod is gone, or a DEL by hand.
func TestUninstallForceRestoresWhileAPodHoldsAnIPAndSaysHowToReleaseIt(t *testing.T) {
	n, in, before := installedWithState(t)
	ns := filepath.Join(t.TempDir(), "pod-a")
	writeFile(t, ns, "", 0o644)
	a := store.Attachment{Network: "pods", ContainerID: "pod-a", IfName: "eth0"}
	inState(t, in.DataDir, "eip0", func(s *store.Store) error {
		return s.WriteRecord(a.Key(), &store.Record{Attachment: a, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.7")}, Netns: netnsAt(t, ns)})
	})
	if err := in.Uninstall(); !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "with --force") {
		t.Fatalf("uninstall while a pod's namespace is there: %v; want ErrHeld mentioning --force", err)
	}

	var logged bytes.Buffer
	in.Log, in.Force = slog.New(slog.NewTextHandler(&logged, nil)), true
	if err := in.Uninstall(); err != nil {
		t.Fatalf("uninstall --force: %v", err)
	}
	sameContent(t, "conf dir after uninstall --force", before, snapshot(t, n.conf))
	out := logged.String()
	for _, want := range []string{"left held", "pods/pod-a/eth0", "192.0.2.7", "once the pod is deleted (" + ns + " gone)",
		`CNI_COMMAND=DEL CNI_CONTAINERID=pod-a CNI_IFNAME=eth0 CNI_PATH=` + n.bin} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall --force logged %q; want it to say %q", out, want)
		}
	}
}
