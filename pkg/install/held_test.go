package install

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/store"
)

// holds records that a pod's attachment holds ip on device, as its ADD
// does; the returned func removes it, as its DEL does.
func holds(t *testing.T, dataDir, device, pod string, ip netip.Addr) (del func()) {
	t.Helper()
	s := store.New(dataDir, device)
	l, err := s.Lock(store.MakeAll, 5*time.Second)
	if err != nil || l == nil {
		t.Fatalf("locking the state of %s: %v", device, err)
	}
	defer l.Unlock()
	a := store.Attachment{Network: "pods", ContainerID: pod, IfName: "eth0"}
	if err := s.WriteRecord(a.Key(), &store.Record{Attachment: a, IPs: []netip.Addr{ip}}); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		l, err := s.Lock(store.MakeParts, 5*time.Second)
		if err != nil || l == nil {
			t.Fatalf("locking the state of %s: %v", device, err)
		}
		defer l.Unlock()
		if err := s.RemoveRecord(a.Key()); err != nil {
			t.Fatal(err)
		}
	}
}

// On containerd a pod's DEL runs the networks loaded now, not those the
// pod was created with: uninstall keeps our entry chained while pods hold
// external IPs (else their DELs never reach us and the IPs leak), changes
// nothing, says what is held and what to do, and fails. Once the DELs
// have run, it restores the conf dir and finishes.
func TestUninstallKeepsOurEntryChainedWhilePodsHoldExternalIPs(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-pods.conflist", bridgeList, 0o644)
	before := snapshot(t, n.conf)
	in := n.installer(t)
	in.DataDir = filepath.Join(t.TempDir(), "state")
	mustInstall(t, in)
	chained := snapshot(t, n.conf)
	del := holds(t, in.DataDir, "eip0", "pod-a", netip.MustParseAddr("192.0.2.7"))

	err := in.Uninstall()
	if !errors.Is(err, ErrHeld) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "eip0") || !strings.Contains(err.Error(), "1 attachments") ||
		!strings.Contains(err.Error(), "delete those pods") || !strings.Contains(err.Error(), "run uninstall again") {
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
