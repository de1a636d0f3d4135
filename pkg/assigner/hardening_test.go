package assigner

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/host"
)

// writeMarker leaves a creating-device marker as a crashed or failed
// creation would, with the given JSON content.
func writeMarker(t *testing.T, f *fixture, content string) string {
	t.Helper()
	if err := os.MkdirAll(f.stateDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(f.stateDir(), "creating-device")
	if err := os.WriteFile(marker, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return marker
}

func TestAnUnmarkedDeviceIsNeverAdoptedWhateverTheMarkerSays(t *testing.T) {
	stray := netip.MustParseAddr("198.51.100.99")
	for _, marker := range []string{`"eip0"`, `{"temp":"eipnew00000001"}`} {
		t.Run(marker, func(t *testing.T) {
			f := newFixture(t)
			f.k.addLink(t, testDevice, "bridge", "", true)
			f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Addrs[stray] = true })
			writeMarker(t, f, marker)
			host := f.k.snapshot(t)

			if err := f.assigner().Ready(true, true); !errors.Is(err, ErrRefused) {
				t.Errorf("Ready beside a foreign eip0 and a marker = %v, want ErrRefused", err)
			}
			if _, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil); !errors.Is(err, ErrRefused) {
				t.Errorf("Add beside a foreign eip0 and a marker = %v, want ErrRefused", err)
			}
			if err := f.assigner().GC("net1", nil); !errors.Is(err, ErrRefused) {
				t.Errorf("GC beside a foreign eip0 and a marker = %v, want ErrRefused", err)
			}
			if got := f.k.snapshot(t); got != host {
				t.Errorf("the foreign eip0 was changed (adopted or stripped):\nbefore %s\nafter  %s", host, got)
			}
		})
	}
}

func TestReadyChangesNoDeviceAndKeepsTheMarker(t *testing.T) {
	f := newFixture(t)
	marker := writeMarker(t, f, `"eip0"`)
	f.k.addLink(t, testDevice, "dummy", "", false)
	host := f.k.snapshot(t)
	if err := f.assigner().Ready(true, false); !errors.Is(err, ErrRefused) {
		t.Errorf("Ready with an unmarked eip0 = %v, want ErrRefused", err)
	}
	if !exists(t, marker) {
		t.Errorf("Ready removed the creating-device marker")
	}
	if f.k.snapshot(t) != host {
		t.Errorf("Ready changed the host (adopted or marked eip0)")
	}
}

func TestACrashedCreationLeavesOnlyATemporaryDeviceThatTheNextInvocationRemoves(t *testing.T) {
	f := newFixture(t)
	a := f.assigner()
	a.step = func(step string) {
		if step == "device" {
			panic("killed at " + step)
		}
	}
	func() {
		defer func() { recover() }()
		a.Add(attA, []netip.Addr{v4a}, nil)
		t.Fatal("the Add did not reach the device step")
	}()
	if l := f.k.link(t, testDevice); l != nil {
		t.Fatalf("a creation killed before its rename left %s under the final name", testDevice)
	}
	if len(tempLinks(t, f)) != 1 {
		t.Fatalf("want one half-made device under a temporary name, have %v", tempLinks(t, f))
	}
	f.add(attB, v4b)
	if left := tempLinks(t, f); len(left) != 0 {
		t.Errorf("the next invocation left the half-made device(s) %v", left)
	}
	d := readDisk(t, f.stateDir())
	if d.creating {
		t.Errorf("the creating-device marker survived the recovery")
	}
	f.del(attA) // the runtime DELs the failed ADD
	assertState(t, f, holdings{attB: {v4b}})
}

func tempLinks(t *testing.T, f *fixture) []string {
	var out []string
	f.k.mustInspect(t, func(h *fakeHost) {
		for _, l := range h.Links {
			if strings.HasPrefix(l.Name, testTempPrefix) {
				out = append(out, l.Name)
			}
		}
	})
	return out
}

func TestAHolderOfAnotherDataDirIsRefusedNamingBoth(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	other := *f
	other.opts.DataDir = filepath.Join(t.TempDir(), "other")
	host := f.k.snapshot(t)

	_, err := other.assigner().Add(attC, []netip.Addr{v4b}, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), f.opts.DataDir) || !strings.Contains(err.Error(), other.opts.DataDir) {
		t.Fatalf("Add from a second dataDir = %v, want ErrRefused naming %s and %s", err, f.opts.DataDir, other.opts.DataDir)
	}
	// The second dataDir's GC (with state of its own, say from before the
	// fix) and DEL must not take the first one's addresses for strays.
	if err := os.MkdirAll(other.stateDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := other.assigner().GC("net2", nil); !errors.Is(err, ErrRefused) {
		t.Errorf("GC from the second dataDir = %v, want ErrRefused", err)
	}
	if err := other.assigner().Del(attC); err != nil {
		t.Errorf("Del from the second dataDir: %v", err)
	}
	if f.k.snapshot(t) != host {
		t.Errorf("the second dataDir changed the first one's holder")
	}
	assertState(t, f, holdings{attA: {v4a, v6a}})
}

func TestAHolderMarkedTheOldWayIsReMarkedForItsDataDir(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Alias = testLegacyAlias })
	if err := f.assigner().Ready(true, false); err != nil {
		t.Fatalf("Ready with an old-format holder: %v", err)
	}
	if l := f.k.link(t, testDevice); l.Alias != testLegacyAlias {
		t.Fatalf("Ready re-marked the holder (%q); it must change nothing", l.Alias)
	}
	f.add(attB, v4b)
	assertState(t, f, holdings{attA: {v4a}, attB: {v4b}}) // checks the new alias
}

func TestGCAndRepairWithTheStateDirectoryLostRemoveTheHoldersAddressesAndProxies(t *testing.T) {
	for _, op := range []string{"GC", "Repair"} {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a, v6a)
			if err := os.RemoveAll(f.stateDir()); err != nil {
				t.Fatal(err)
			}
			var err error
			if op == "GC" {
				err = f.assigner().GC("net1", []Attachment{attA})
			} else {
				_, err = f.assigner().Repair()
			}
			if err != nil {
				t.Fatalf("%s with the state directory lost: %v", op, err)
			}
			if got := f.holderAddrs(); len(got) != 0 {
				t.Errorf("%s left %v on the holder, which no record holds", op, got)
			}
			if got := f.k.proxies(t, "eth0"); len(got) != 0 {
				t.Errorf("%s left the proxy entries %v on eth0", op, got)
			}
		})
	}
}

func TestGCWithTheStateDirectoryLostLeavesAnOldFormatHolderAlone(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Alias = testLegacyAlias })
	if err := os.RemoveAll(f.stateDir()); err != nil {
		t.Fatal(err)
	}
	host := f.k.snapshot(t)
	if err := f.assigner().GC("net1", nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if f.k.snapshot(t) != host || exists(t, f.stateDir()) {
		t.Errorf("GC took a holder that may be another dataDir's for its own")
	}
}

// v6eth1 is an IPv6 IP routed through eth1 (see onEth1).
var v6eth1 = netip.MustParseAddr("2001:db8::5")

// onEth1 routes v6eth1 through eth1, as v4other already is.
func onEth1(f *fixture) { f.k.addNet("2001:db8::/96", eth1Index, true) }

// viaEth0 gives v4other and v6eth1 more specific routes through eth0, the
// uplink left once eth1 is gone.
func viaEth0(f *fixture) {
	f.k.addNet("203.0.113.0/28", ethIndex, true)
	f.k.addNet("2001:db8::/112", ethIndex, true)
}

func TestAHeldIPWhoseUplinkVanishedIsReHomedByTheNextAdd(t *testing.T) {
	f := newFixture(t)
	v6 := v6eth1
	onEth1(f)
	f.add(attA, v4other, v6) // both on eth1
	if got := f.k.proxies(t, "eth1"); len(got) != 1 {
		t.Fatalf("setup: proxies on eth1 %v, want %s", got, v6)
	}
	f.k.dropUplink("eth1")
	viaEth0(f)

	placed := f.add(attB, v4other, v6)
	for _, p := range placed {
		if p.Uplink.Name != "eth0" {
			t.Errorf("%s is announced on %q, want eth0, the uplink its route names now", p.Addr, p.Uplink.Name)
		}
	}
	if got := f.k.proxies(t, "eth0"); len(got) != 1 || got[0] != v6 {
		t.Errorf("proxy entries on eth0 are %v, want [%s]", got, v6)
	}
	assertState(t, f, holdings{attA: {v4other, v6}, attB: {v4other, v6}})
}

func TestAnAddWhoseHeldIPHasNoUplinkLeftNamesTheIP(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4other)
	f.k.dropUplink("eth1") // and its route still points there
	_, err := f.assigner().Add(attB, []netip.Addr{v4other}, nil)
	if !errors.Is(err, ErrRefused) || !strings.HasPrefix(err.Error(), v4other.String()+": ") {
		t.Fatalf("Add = %v, want ErrRefused starting with the IP", err)
	}
}

func TestGCReHomesAHeldIPWhoseUplinkVanishedAndNeverFailsForIt(t *testing.T) {
	f := newFixture(t)
	v6 := v6eth1
	onEth1(f)
	f.add(attA, v4other, v6)
	f.k.dropUplink("eth1")
	rep, err := f.assigner().Report()
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if !slices.ContainsFunc(rep.Drift, func(d string) bool { return strings.Contains(d, "uplink eth1 is gone") }) {
		t.Errorf("Report's drift is %q; want the vanished uplink eth1 named", rep.Drift)
	}
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatalf("GC with an uplink gone and no other route: %v", err)
	}
	viaEth0(f)
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatalf("GC once another uplink has a route: %v", err)
	}
	d := readDisk(t, f.stateDir())
	if d.index[v6].Uplink != "eth0" || d.index[v4other].Uplink != "eth0" {
		t.Errorf("after GC the index names uplinks %q and %q, want eth0", d.index[v4other].Uplink, d.index[v6].Uplink)
	}
	assertState(t, f, holdings{attA: {v4other, v6}})
}

// TestAnAddOnAnExistingHolderAsksForItsLinkOnce counts the link requests
// of an ADD: the holder once (screening and the locked part share it), the
// uplink once.
func TestAnAddOnAnExistingHolderAsksForItsLinkOnce(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.k.resetCounts()
	f.add(attB, v4b)
	if n := f.k.count("lookupHolder"); n != 1 {
		t.Errorf("the ADD looked the holder up %d times, want 1", n)
	}
	if n := f.k.count("uplinkByIndex") + f.k.count("uplinkByName"); n != 1 {
		t.Errorf("the ADD looked its uplink up %d times, want 1", n)
	}
	for _, m := range []string{"createHolder", "markHolder", "setHolderUp"} {
		if n := f.k.count(m); n != 0 {
			t.Errorf("the ADD on an existing holder made %d %s requests", n, m)
		}
	}
}

// A failed re-ADD restores the earlier record with the uplinks its IPs had,
// which may be the vanished one: the undo (and any replay of it) must not
// fail for that, or every later invocation would.
func TestAFailedReAddAfterTheUplinkVanishedIsUndoneWithoutWedging(t *testing.T) {
	f := newFixture(t)
	onEth1(f)
	f.add(attA, v6eth1)
	f.k.dropUplink("eth1")
	viaEth0(f)
	fail := hooks{announce: func([]announce.Target) error { return Errorf(ErrHost, "announce refused") }}
	if _, err := f.assigner().Add(attA, []netip.Addr{v6eth1, v4a}, fail); err == nil || strings.Contains(err.Error(), "rolling back also failed") {
		t.Fatalf("the failed re-ADD = %v, want its own error with the undo done", err)
	}
	if d := readDisk(t, f.stateDir()); d.journal {
		t.Fatalf("the undo left its journal: every later invocation would replay it")
	}
	f.add(attB, v6eth1)
	assertState(t, f, holdings{attA: {v6eth1}, attB: {v6eth1}})
}

func TestABridgeOfOursThatGotPortsIsRefused(t *testing.T) {
	f := newFixture(t)
	f.k.addLink(t, testDevice, "bridge", host.HolderAlias(host.CanonicalDir(f.opts.DataDir)), true)
	f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Ports = 1 })
	host := f.k.snapshot(t)
	if _, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "1 ports") {
		t.Fatalf("Add on our alias over a bridge with a port = %v, want ErrRefused naming the ports", err)
	}
	if f.k.snapshot(t) != host {
		t.Errorf("the refused Add changed the host")
	}
}

func TestADataDirTooLongForTheAliasIsNamedByItsHash(t *testing.T) {
	long := "/" + strings.Repeat("d", 300)
	alias := host.HolderAlias(long)
	if len(alias) > testMaxAlias || !strings.HasPrefix(alias, testHashAlias) {
		t.Fatalf("HolderAlias of a %d-byte dataDir = %q (%d bytes), want a hash within %d", len(long), alias, len(alias), testMaxAlias)
	}
	f := newFixture(t)
	f.k.addLink(t, testDevice, "dummy", alias, true)
	_, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), alias) || !strings.Contains(err.Error(), f.opts.DataDir) {
		t.Fatalf("Add beside a holder of a hashed dataDir = %v, want ErrRefused naming its alias and our dataDir", err)
	}
}
