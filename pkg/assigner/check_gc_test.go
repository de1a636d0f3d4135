package assigner

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// mutating are the kernel requests that change the host.
var mutating = []string{"addAddr", "delAddr", "addRoute", "delRoute", "addProxy", "delProxy"}

func TestCheckPassesAfterAddAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4a)
	files, host := tree(t, f.stateDir()), f.k.snapshot(t)
	f.k.resetCounts()

	ips, err := f.assigner().Check(attA)
	if err != nil {
		t.Fatalf("Check right after Add: %v", err)
	}
	if !slices.Equal(sorted(ips), []netip.Addr{v4a, v6a}) {
		t.Errorf("Check returned %v, want the recorded %v", ips, []netip.Addr{v4a, v6a})
	}
	if f.k.snapshot(t) != host || !sameTree(files, tree(t, f.stateDir())) {
		t.Errorf("Check changed the host or the state")
	}
	for _, m := range append(mutating, "holderAddrs") {
		if n := f.k.count(m); n != 0 {
			t.Errorf("Check made %d %s requests, want none", n, m)
		}
	}
}

func TestCheckPassesWhileTheKernelsIPv6LocalRouteTrailsTheAddress(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.k.routeLag = true
	if _, err := f.assigner().Check(attA); err != nil {
		t.Fatalf("Check right after Add, before the IPv6 local route is in the FIB: %v", err)
	}
	f.k.changeLink(t, testDevice, func(l *fakeLink) { delete(l.Addrs, v6a) })
	if _, err := f.assigner().Check(attA); err == nil || !strings.Contains(err.Error(), "is not on holder") {
		t.Errorf("Check with the IPv6 address gone: %v, want it named as not on the holder", err)
	}
}

func TestCheckReportsDrift(t *testing.T) {
	tests := []struct {
		name     string
		att      Attachment
		drift    func(t *testing.T, f *fixture)
		inErrMsg string
	}{
		{"no record", attB, func(*testing.T, *fixture) {}, "no record"},
		{"no state directory", attA, func(t *testing.T, f *fixture) {
			if err := os.RemoveAll(f.stateDir()); err != nil {
				t.Fatal(err)
			}
		}, "no record"},
		{"holder missing", attA, func(t *testing.T, f *fixture) { f.k.deleteLink(t, testDevice) }, "missing"},
		{"holder down", attA, func(t *testing.T, f *fixture) {
			f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Up = false })
		}, "down"},
		{"IPv4 IP missing from the holder", attA, func(t *testing.T, f *fixture) {
			f.k.changeLink(t, testDevice, func(l *fakeLink) { delete(l.Addrs, v4a) })
		}, v4a.String()},
		{"IPv6 IP missing from the holder", attA, func(t *testing.T, f *fixture) {
			f.k.changeLink(t, testDevice, func(l *fakeLink) { delete(l.Addrs, v6a) })
		}, v6a.String()},
		{"IPv6 proxy entry missing", attA, func(t *testing.T, f *fixture) { f.k.removeProxy(t, "eth0", v6a) }, "proxy"},
		{"index no longer lists the attachment", attA, func(t *testing.T, f *fixture) {
			if err := os.Remove(filepath.Join(f.stateDir(), "ip", v4a.String()+".json")); err != nil {
				t.Fatal(err)
			}
		}, v4a.String()},
		{"an interrupted change pending", attA, func(t *testing.T, f *fixture) {
			j := filepath.Join(f.stateDir(), "journal")
			if err := os.WriteFile(j, []byte(`{"key":"x","record":null,"touch":[]}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "interrupted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a, v6a)
			tt.drift(t, f)
			host := f.k.snapshot(t)
			f.k.resetCounts()

			_, err := f.assigner().Check(tt.att)
			if !errors.Is(err, ErrDrift) {
				t.Fatalf("Check = %v, want ErrDrift", err)
			}
			if !strings.Contains(err.Error(), tt.inErrMsg) {
				t.Errorf("error %q should say what drifted (%q)", err, tt.inErrMsg)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("Check repaired or changed the host; it must change nothing")
			}
			for _, m := range mutating {
				if n := f.k.count(m); n != 0 {
					t.Errorf("Check made %d %s requests, want none", n, m)
				}
			}
		})
	}
}

func TestGCDropsOnlyThisNetworksUnlistedRecords(t *testing.T) {
	attA2 := Attachment{Network: "net1", ContainerID: "ctr-a", IfName: "eth1"}
	tests := []struct {
		name string
		keep []Attachment
		want holdings
	}{
		{"one listed", []Attachment{attB}, holdings{attB: {v4b}, attC: {v4a, v6b}}},
		{"none listed", nil, holdings{attC: {v4a, v6b}}},
		{"empty list", []Attachment{}, holdings{attC: {v4a, v6b}}},
		{"listing another network's attachment keeps nothing of this one", []Attachment{{Network: "net2", ContainerID: "ctr-a", IfName: "eth0"}}, holdings{attC: {v4a, v6b}}},
		{"same container, other interface listed", []Attachment{attA2}, holdings{attA2: {v4c}, attC: {v4a, v6b}}},
		{"all listed", []Attachment{attA, attA2, attB}, holdings{attA: {v4a, v6a}, attA2: {v4c}, attB: {v4b}, attC: {v4a, v6b}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a, v6a)
			f.add(attA2, v4c)
			f.add(attB, v4b)
			f.add(attC, v4a, v6b)

			if err := f.assigner().GC("net1", tt.keep); err != nil {
				t.Fatalf("GC: %v", err)
			}
			assertState(t, f, tt.want)
		})
	}
}

func TestGCReconcilesTheHolderWithTheRecords(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attC, v4b)
	stray4, stray6 := netip.MustParseAddr("198.51.100.50"), netip.MustParseAddr("2001:db8::50")
	f.k.changeLink(t, testDevice, func(l *fakeLink) {
		delete(l.Addrs, v4a)
		delete(l.Addrs, v6a)
		l.Addrs[stray4], l.Addrs[stray6] = true, true
	})
	f.k.removeProxy(t, "eth0", v6a)

	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	assertState(t, f, holdings{attA: {v4a, v6a}, attC: {v4b}})
	if got := f.holderAddrs(); slices.Contains(got, stray4) || slices.Contains(got, stray6) {
		t.Errorf("GC left addresses no record holds on the holder: %v", got)
	}
}

func TestGCRebuildsALostIndexAndRecreatesAMissingHolder(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	if err := os.RemoveAll(filepath.Join(f.stateDir(), "ip")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.stateDir(), "ip"), 0o700); err != nil {
		t.Fatal(err)
	}
	f.k.deleteLink(t, testDevice)
	f.k.removeProxy(t, "eth0", v6a)

	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	assertState(t, f, holdings{attA: {v4a, v6a}})
}

func TestGCOfAnUnusedDeviceCreatesNothing(t *testing.T) {
	f := newFixture(t)
	if err := f.assigner().GC("net1", nil); err != nil {
		t.Fatalf("GC with no state: %v", err)
	}
	assertUntouched(t, f)
	if exists(t, f.opts.DataDir) {
		t.Errorf("GC created the data directory %s", f.opts.DataDir)
	}
}

func TestReadyReportsWhyAnAddCouldNotWork(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, k *fakeKernel)
		v4, v6 bool
		kind   error
	}{
		{"all fine", nil, true, true, nil},
		{"arp_ignore on the default route's uplink", func(t *testing.T, k *fakeKernel) {
			k.setSysctl("ipv4/conf/eth1/arp_ignore", 1)
		}, true, false, ErrUnreachable},
		{"arp_ignore on all with no default route", func(t *testing.T, k *fakeKernel) {
			k.mu.Lock()
			k.nets = nil
			k.mu.Unlock()
			k.setSysctl("ipv4/conf/all/arp_ignore", 1)
		}, true, false, ErrUnreachable},
		{"IPv6 forwarding off on the default route's uplink", func(t *testing.T, k *fakeKernel) {
			k.setSysctl("ipv6/conf/eth1/forwarding", 0)
		}, false, true, ErrUnreachable},
		{"IPv6 forwarding off but only IPv4 in use", func(t *testing.T, k *fakeKernel) {
			k.setSysctl("ipv6/conf/eth1/forwarding", 0)
		}, true, false, nil},
		{"a foreign device of the holder's name", func(t *testing.T, k *fakeKernel) {
			k.addLink(t, testDevice, "device", "", true)
		}, true, true, ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.k.addNet("0.0.0.0/0", eth1Index, false)
			f.k.addNet("::/0", eth1Index, false)
			if tt.setup != nil {
				tt.setup(t, f.k)
			}
			host := f.k.snapshot(t)
			err := f.assigner().Ready(tt.v4, tt.v6)
			if tt.kind == nil && err != nil {
				t.Fatalf("Ready = %v, want success", err)
			}
			if tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Fatalf("Ready = %v, want an error of kind %v", err, tt.kind)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("Ready changed the host")
			}
		})
	}
}

func TestReportNamesEveryDriftAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4a)
	stray := netip.MustParseAddr("198.51.100.77")
	f.k.changeLink(t, testDevice, func(l *fakeLink) {
		delete(l.Addrs, v4a)
		l.Addrs[stray] = true
	})
	f.k.removeProxy(t, "eth0", v6a)
	files, host := tree(t, f.stateDir()), f.k.snapshot(t)

	rep, err := f.assigner().Report()
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if rep.Holder != "up" || len(rep.IPs) != 2 {
		t.Errorf("Report says holder %q with %d IPs, want up with 2: %+v", rep.Holder, len(rep.IPs), rep)
	}
	for _, want := range []string{v4a.String() + ": held but not on", stray.String() + ": on " + testDevice, v6a.String() + ": no proxy"} {
		found := slices.ContainsFunc(rep.Drift, func(d string) bool { return strings.HasPrefix(d, want) })
		if !found {
			t.Errorf("Report's drift %q does not say %q", rep.Drift, want)
		}
	}
	if f.k.snapshot(t) != host || !sameTree(files, tree(t, f.stateDir())) {
		t.Errorf("Report changed the host or the state")
	}
}

func TestRepairAfterACorruptIndexIsMovedAsideRestoresConsistency(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4a)
	bad := filepath.Join(f.stateDir(), "ip", v4a.String()+".json")
	if err := os.WriteFile(bad, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.assigner().Del(attB); !errors.Is(err, ErrState) {
		t.Fatalf("Del with a corrupt index = %v, want ErrState", err)
	}
	if err := os.Rename(bad, filepath.Join(f.stateDir(), "corrupt-"+v4a.String())); err != nil {
		t.Fatal(err)
	}

	if _, err := f.assigner().Repair(); err != nil {
		t.Fatalf("Repair: %v", err)
	}
	assertState(t, f, holdings{attA: {v4a, v6a}, attB: {v4a}})
	f.del(attB)
	f.del(attA)
	assertState(t, f, holdings{})
}
