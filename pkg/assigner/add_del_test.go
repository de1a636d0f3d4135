package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/host"
)

func TestAddPutsIPsOnTheHolderAndRecordsThem(t *testing.T) {
	f := newFixture(t)
	placed := f.add(attA, v4a, v6a)

	assertState(t, f, holdings{attA: {v4a, v6a}})
	if len(placed) != 2 {
		t.Fatalf("Add placed %d IPs, want 2: %+v", len(placed), placed)
	}
	for _, p := range placed {
		if !p.First {
			t.Errorf("%s: First is false, but this Add gave it its first holder", p.Addr)
		}
		if p.Uplink.Name != "eth0" || !slices.Equal(p.Uplink.MAC, ethMAC) {
			t.Errorf("%s: placed on uplink %s (%s), want eth0 (%s), the interface of its connected route", p.Addr, p.Uplink.Name, p.Uplink.MAC, ethMAC)
		}
	}
	if n := f.k.count("holderAddrs"); n != 0 {
		t.Errorf("Add listed the holder's addresses %d times; ADD must not list them", n)
	}
}

func TestAddChoosesTheUplinkOfTheRouteUnlessOneIsConfigured(t *testing.T) {
	tests := []struct {
		name       string
		configured string
		ip         netip.Addr
		want       string
	}{
		{"IPv4 in eth0's subnet", "", v4a, "eth0"},
		{"IPv4 in eth1's subnet", "", v4other, "eth1"},
		{"IPv6 in eth0's subnet", "", v6a, "eth0"},
		{"configured uplink wins over the route", "eth1", v4a, "eth1"},
		{"configured uplink for IPv6", "eth1", v6a, "eth1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.opts.Uplink = tt.configured
			placed := f.add(attA, tt.ip)
			if len(placed) != 1 || placed[0].Uplink.Name != tt.want {
				t.Fatalf("Add placed %+v, want %s on uplink %s", placed, tt.ip, tt.want)
			}
			if e := readDisk(t, f.stateDir()).index[tt.ip]; e.Uplink != tt.want {
				t.Errorf("index of %s names uplink %q, want %q so that its proxy entry is removed from there", tt.ip, e.Uplink, tt.want)
			}
			if tt.ip.Is6() {
				if got := f.k.proxies(t, tt.want); !slices.Contains(got, tt.ip) {
					t.Errorf("no proxy entry for %s on %s (entries %v)", tt.ip, tt.want, got)
				}
			}
		})
	}
}

func TestReleaseKeepsAddressWhileOthersHoldIt(t *testing.T) {
	for _, order := range [][2]Attachment{{attA, attB}, {attB, attA}} {
		t.Run("release "+order[0].ContainerID+" first", func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a, v6a)
			f.add(attB, v4a, v6a, v4b)

			f.del(order[0])
			want := holdings{attA: {v4a, v6a}, attB: {v4a, v6a, v4b}}
			delete(want, order[0])
			assertState(t, f, want)
			if got := f.holderAddrs(); !slices.Contains(got, v4a) || !slices.Contains(got, v6a) {
				t.Fatalf("DEL of %s removed a still-referenced IP: holder has %v", order[0], got)
			}

			f.del(order[1])
			assertState(t, f, holdings{})
			if got := f.holderAddrs(); len(got) != 0 {
				t.Errorf("the last DEL left %v on the holder", got)
			}
		})
	}
}

func TestRepeatedAddOfOneAttachmentCountsOnce(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attA, v4a, v6a)
	assertState(t, f, holdings{attA: {v4a, v6a}})

	f.del(attA)
	if got := f.holderAddrs(); len(got) != 0 {
		t.Errorf("one DEL after two ADDs of the same attachment left %v on the holder: the ADDs counted twice", got)
	}
	assertState(t, f, holdings{})
}

func TestRepeatedDelReleasesOnce(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4a, v6a)
	f.del(attA)
	f.del(attA)
	assertState(t, f, holdings{attB: {v4a, v6a}})
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a, v6a}) {
		t.Errorf("a second DEL of the same attachment released B's IPs: holder has %v", got)
	}
}

func TestReAddReplacesTheRecordAndReleasesOnlyUnheldOldIPs(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4c)
	f.add(attA, v4a, v6a, v4c)
	placed := f.add(attA, v6a, v4b, v6b)

	assertState(t, f, holdings{attA: {v6a, v4b, v6b}, attB: {v4c}})
	first := map[netip.Addr]bool{}
	for _, p := range placed {
		first[p.Addr] = p.First
	}
	want := map[netip.Addr]bool{v6a: false, v4b: true, v6b: true}
	for ip, w := range want {
		if first[ip] != w {
			t.Errorf("re-ADD placed %s with First=%v, want %v", ip, first[ip], w)
		}
	}
}

func TestReAddRepairsWhatWasRemovedByHand(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.k.changeLink(t, testDevice, func(l *fakeLink) {
		delete(l.Addrs, v4a)
		delete(l.Addrs, v6a)
	})
	f.k.removeProxy(t, "eth0", v6a)

	placed := f.add(attA, v4a, v6a)
	assertState(t, f, holdings{attA: {v4a, v6a}})
	if len(placed) != 2 {
		t.Errorf("re-ADD placed %v, want both IPs so that both are announced again", placed)
	}
}

func TestAddWithNoIPsTouchesNothing(t *testing.T) {
	f := newFixture(t)
	placed, err := f.assigner().Add(attA, nil, nil)
	if err != nil || placed != nil {
		t.Fatalf("Add with no IPs = %v, %v; want nil, nil", placed, err)
	}
	assertUntouched(t, f)
	if exists(t, f.opts.DataDir) {
		t.Errorf("Add with no IPs created the data directory %s", f.opts.DataDir)
	}
	for _, m := range []string{"holder", "lookup"} {
		if n := f.k.count(m); n != 0 {
			t.Errorf("Add with no IPs made %d %s requests, want none", n, m)
		}
	}
}

func TestDelOfSomethingNotHeldSucceedsAndChangesNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
	}{
		{"state directory does not exist", func(*fixture) {}},
		{"attachment unknown beside another", func(f *fixture) { f.add(attB, v4a) }},
		{"attachment already deleted", func(f *fixture) { f.add(attA, v4a); f.del(attA) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			before, host := tree(t, f.opts.DataDir), f.k.snapshot(t)
			f.k.resetCounts()

			if err := f.assigner().Del(attA); err != nil {
				t.Fatalf("Del of an attachment that holds nothing: %v, want success", err)
			}
			if after := tree(t, f.opts.DataDir); !sameTree(before, after) {
				t.Errorf("Del changed the data directory:\nbefore %v\nafter  %v", before, after)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("Del changed the host")
			}
			if n := f.k.count("holder"); n != 0 {
				t.Errorf("Del looked the holder up %d times for an attachment it has no record of", n)
			}
		})
	}
}

func TestAddRefusesWhatTheHostCannotServeAndChangesNothing(t *testing.T) {
	unrouted := netip.MustParseAddr("100.64.0.1")
	bcast, anycast := netip.MustParseAddr("192.0.2.255"), netip.MustParseAddr("2001:db8::")
	tests := []struct {
		name     string
		setup    func(k *fakeKernel)
		uplink   string
		ip       netip.Addr
		kind     error
		inErrMsg string
	}{
		{"IP local on another interface", nil, "", nodeIP, ErrRefused, "eth0"},
		{"network address of a connected /24", nil, "", netip.MustParseAddr("192.0.2.0"), ErrRefused, "network"},
		{"broadcast address of a connected /24", nil, "", netip.MustParseAddr("192.0.2.255"), ErrRefused, "broadcast"},
		{"broadcast address as the FIB answers for it", func(k *fakeKernel) {
			k.setRoute(bcast, host.Route{Dev: ethIndex, Prefix: netip.PrefixFrom(bcast, 32), Special: true})
		}, "", bcast, ErrRefused, "broadcast address of uplink subnet 192.0.2.0/24"},
		{"IPv6 subnet-router anycast address", func(k *fakeKernel) {
			k.setRoute(anycast, host.Route{Dev: ethIndex, Prefix: netip.PrefixFrom(anycast, 128), Special: true})
		}, "", anycast, ErrRefused, "network address of uplink subnet 2001:db8::/64"},
		{"no route and no uplink", nil, "", unrouted, ErrRefused, "uplink"},
		{"configured uplink missing", nil, "eth9", v4a, ErrRefused, "eth9"},
		{"uplink down", func(k *fakeKernel) { k.changeUplink("eth0", func(u *fakeUplink) { u.down = true }) }, "", v4a, ErrRefused, "down"},
		{"arp_ignore 1 on all", func(k *fakeKernel) { k.setSysctl("ipv4/conf/all/arp_ignore", 1) }, "", v4a, ErrUnreachable, "arp_ignore"},
		{"arp_ignore 2 on the uplink", func(k *fakeKernel) { k.setSysctl("ipv4/conf/eth0/arp_ignore", 2) }, "", v4a, ErrUnreachable, "eth0.arp_ignore"},
		{"IPv6 forwarding 0 on the uplink", func(k *fakeKernel) { k.setSysctl("ipv6/conf/eth0/forwarding", 0) }, "", v6a, ErrUnreachable, "forwarding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.opts.Uplink = tt.uplink
			if tt.setup != nil {
				tt.setup(f.k)
			}
			host := f.k.snapshot(t)
			// A servable IP beside the refused one must not go on either.
			_, err := f.assigner().Add(attA, []netip.Addr{tt.ip, v4b}, nil)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("Add(%s) = %v, want an error of kind %v", tt.ip, err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.inErrMsg) {
				t.Errorf("error %q should give the reason (%q)", err, tt.inErrMsg)
			}
			if tt.uplink == "" && !strings.Contains(err.Error(), tt.ip.String()) {
				t.Errorf("error %q should name the IP %s", err, tt.ip)
			}
			assertUntouched(t, f)
			if f.k.snapshot(t) != host {
				t.Errorf("a refused Add changed the host")
			}
		})
	}
}

func TestAddRefusesAForeignHolderAndLeavesItAlone(t *testing.T) {
	stray := netip.MustParseAddr("198.51.100.99")
	tests := []struct {
		name  string
		setup func(t *testing.T, k *fakeKernel)
	}{
		{"unmarked dummy", func(t *testing.T, k *fakeKernel) { k.addLink(t, testDevice, "dummy", "", true) }},
		{"dummy marked by someone else", func(t *testing.T, k *fakeKernel) { k.addLink(t, testDevice, "dummy", "uplink to lab", true) }},
		{"real NIC", func(t *testing.T, k *fakeKernel) { k.addLink(t, testDevice, "device", "", true) }},
		{"marked bridge with ports", func(t *testing.T, k *fakeKernel) {
			k.addLink(t, testDevice, "bridge", testLegacyAlias, true)
			k.changeLink(t, testDevice, func(l *fakeLink) { l.Ports = 2 })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(t, f.k)
			f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Addrs[stray] = true })
			host := f.k.snapshot(t)

			_, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), testDevice) {
				t.Fatalf("Add on a foreign %s = %v, want ErrRefused naming the device", testDevice, err)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("the foreign device (or the host) was changed by a refused Add")
			}
			if exists(t, f.stateDir()) {
				t.Errorf("a refused Add created %s", f.stateDir())
			}

			// GC must not take the stray address off a device that is not ours.
			if err := os.MkdirAll(f.stateDir(), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := f.assigner().GC("net1", nil); !errors.Is(err, ErrRefused) {
				t.Errorf("GC with a foreign holder = %v, want ErrRefused", err)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("GC changed the foreign device")
			}
		})
	}
}

func TestProbeRunsOnlyForIPsGettingTheirFirstHolder(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	var mu sync.Mutex
	var probed []netip.Addr
	probe := hooks{probe: func(t2 announce.Target) error {
		mu.Lock()
		defer mu.Unlock()
		probed = append(probed, t2.Addr)
		if t2.Uplink.Name != "eth0" {
			t.Errorf("probe of %s got uplink %q, want eth0", t2.Addr, t2.Uplink.Name)
		}
		return nil
	}}

	f.probing()
	placed, err := f.assigner().Add(attA, []netip.Addr{v4a, v6a}, probe)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	if !slices.Equal(sorted(probed), []netip.Addr{v6a}) {
		t.Errorf("probed %v, want only %s: %s already has a holder on this node", probed, v6a, v4a)
	}
	for _, p := range placed {
		if slices.Contains(probed, p.Addr) && !p.First {
			t.Errorf("probed %s, which this ADD did not give its first holder", p.Addr)
		}
	}

	probed = nil
	if _, err := f.assigner().Add(attA, []netip.Addr{v4a, v6a}, probe); err != nil {
		t.Fatalf("re-Add: %v", err)
	}
	if len(probed) != 0 {
		t.Errorf("a re-ADD probed %v, want nothing: every IP is already held", probed)
	}
}

func TestProbeErrorRefusesTheAddWithNothingChanged(t *testing.T) {
	tests := []struct {
		name  string
		setup []holding
	}{
		{"fresh host", nil},
		{"beside a holder of one of the IPs", []holding{{attB, []netip.Addr{v4a}}}},
		{"re-add adding an IP", []holding{{attA, []netip.Addr{v4a}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			held := holdings{}
			for _, h := range tt.setup {
				f.add(h.att, h.ips...)
				held[h.att] = h.ips
			}
			files, host := tree(t, f.opts.DataDir), f.k.snapshot(t)
			conflict := errors.New("198.51.100.2 answered by 02:aa:bb:cc:dd:ee")

			f.probing()
			_, err := f.assigner().Add(attA, []netip.Addr{v4a, v4b}, hooks{
				probe: func(announce.Target) error { return conflict },
			})
			if !errors.Is(err, conflict) {
				t.Fatalf("Add = %v, want the probe's error", err)
			}
			if f.k.snapshot(t) != host {
				t.Errorf("a probe refusal changed the host")
			}
			if after := tree(t, f.opts.DataDir); !sameTree(files, after) {
				t.Errorf("a probe refusal changed the state:\nbefore %v\nafter  %v", files, after)
			}
			if len(tt.setup) == 0 {
				assertUntouched(t, f)
			} else {
				assertState(t, f, held)
			}
		})
	}
}

func TestAnnounceErrorRollsTheAddBack(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
		// want is what is held after the failed Add of attA.
		want holdings
	}{
		{"new attachment beside a holder", func(f *fixture) { f.add(attB, v4a) }, holdings{attB: {v4a}}},
		// A failed re-ADD leaves the attachment what it held before.
		{"re-add of an attachment", func(f *fixture) { f.add(attB, v4a); f.add(attA, v4a, v4c) }, holdings{attA: {v4a, v4c}, attB: {v4a}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			failed := errors.New("sendto: network is down")
			var announced []netip.Addr

			_, err := f.assigner().Add(attA, []netip.Addr{v4a, v4b, v6a}, hooks{
				announce: func(ps []announce.Target) error {
					for _, p := range ps {
						announced = append(announced, p.Addr)
					}
					return failed
				},
			})
			if !errors.Is(err, failed) {
				t.Fatalf("Add = %v, want the announcer's error", err)
			}
			if !slices.Equal(sorted(announced), sorted([]netip.Addr{v4a, v4b, v6a})) {
				t.Errorf("announced %v, want every IP of the attachment, also the one already held", announced)
			}
			assertState(t, f, tt.want)
		})
	}
}

// A re-ADD that drops an IP whose proxy entry another program made, and
// fails (its announcement), gives the attachment its IP back: the index
// must still say the entry is another program's, so that the DEL that
// follows keeps it.
func TestAFailedReAddThatDroppedAnIPKeepsTheOtherProgramsProxyEntry(t *testing.T) {
	for _, reAdd := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "failed re-ADD"}[reAdd], func(t *testing.T) { failedReAddDroppingAProxiedIP(t, reAdd) })
	}
}

func failedReAddDroppingAProxiedIP(t *testing.T, reAdd bool) {
	f := newFixture(t)
	f.k.inspect(func(h *fakeHost) error {
		h.Proxies["eth0"] = map[netip.Addr]bool{v6a: true}
		return nil
	})
	f.add(attA, v6a)
	if !reAdd {
		f.del(attA)
		f.k.inspect(func(h *fakeHost) error {
			if !h.Proxies["eth0"][v6a] {
				t.Errorf("control: the other program's proxy entry for %s is gone after DEL", v6a)
			}
			return nil
		})
		return
	}
	_, err := f.assigner().Add(attA, []netip.Addr{v6b}, hooks{announce: func([]announce.Target) error { return errors.New("announce refused") }})
	if err == nil {
		t.Fatal("the re-ADD whose announcement fails succeeded")
	}
	f.del(attA)
	f.k.inspect(func(h *fakeHost) error {
		if !h.Proxies["eth0"][v6a] {
			t.Errorf("the other program's proxy entry for %s is gone after a failed re-ADD and DEL", v6a)
		}
		return nil
	})
}

// A re-ADD's journal that a binary from before the journal kept the old
// IPs' index entries (oldUplinks alone) left, killed after its change was
// done, is still rolled back by this one: the attachment holds its IP
// again, on its uplink, and the IP the re-ADD took is let go.
func TestAnEarlierBinarysJournalOfAKilledReAddIsRolledBack(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	key := attA.Key()
	old, err := os.ReadFile(filepath.Join(f.stateDir(), "att", key+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f.add(attA, v4b)
	rec, err := os.ReadFile(filepath.Join(f.stateDir(), "att", key+".json"))
	if err != nil {
		t.Fatal(err)
	}
	j := fmt.Sprintf(`{"op":"add","key":%q,"record":%s,"touch":["%s","%s"],"uplinks":{"%s":"eth0"},"old":%s,"oldUplinks":{"%s":"eth0"}}`,
		key, rec, v4a, v4b, v4b, old, v4a)
	if err := os.WriteFile(filepath.Join(f.stateDir(), "journal"), []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}
	f.add(attB, v4c) // any invocation rolls back what it finds
	assertState(t, f, holdings{attA: {v4a}, attB: {v4c}})
	var e ipEntry
	decodeFile(t, filepath.Join(f.stateDir(), "ip", v4a.String()+".json"), &e)
	if e.Uplink != "eth0" {
		t.Errorf("after the roll-back %s is on uplink %q; want eth0", v4a, e.Uplink)
	}
}

func TestAddRollsBackWhenTheKernelRefusesAnAddress(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	f.k.failWith("addAddr", v4c, Errorf(ErrHost, "adding %s to holder device: no buffer space", v4c))

	_, err := f.assigner().Add(attA, []netip.Addr{v4a, v4b, v4c}, nil)
	if !errors.Is(err, ErrHost) {
		t.Fatalf("Add = %v, want ErrHost", err)
	}
	assertState(t, f, holdings{attB: {v4a}})
}

func TestAddDelAndCheckNeverListTheHoldersAddresses(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4a, v4b)
	if _, err := f.assigner().Check(attA); err != nil {
		t.Fatalf("Check: %v", err)
	}
	f.del(attA)
	f.del(attB)
	if n := f.k.count("holderAddrs"); n != 0 {
		t.Errorf("ADD, CHECK and DEL listed the holder's addresses %d times; listing costs milliseconds per thousand", n)
	}
	if err := f.assigner().GC("net1", nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if n := f.k.count("holderAddrs"); n != 1 {
		t.Errorf("GC listed the holder's addresses %d times, want once (it is the one verb that must)", n)
	}
}

func TestDelNeverFailsBecauseSomethingIsAlreadyGone(t *testing.T) {
	tests := []struct {
		name string
		gone func(t *testing.T, f *fixture)
	}{
		{"holder device deleted", func(t *testing.T, f *fixture) { f.k.deleteLink(t, testDevice) }},
		{"addresses removed by hand", func(t *testing.T, f *fixture) {
			f.k.changeLink(t, testDevice, func(l *fakeLink) { clear(l.Addrs) })
		}},
		{"proxy entry removed by hand", func(t *testing.T, f *fixture) { f.k.removeProxy(t, "eth0", v6a) }},
		{"uplink gone", func(t *testing.T, f *fixture) { f.k.dropUplink("eth0") }},
		{"index entry removed by hand", func(t *testing.T, f *fixture) {
			if err := os.Remove(filepath.Join(f.stateDir(), "ip", v4a.String()+".json")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a, v6a)
			tt.gone(t, f)
			if err := f.assigner().Del(attA); err != nil {
				t.Fatalf("Del after the %s: %v, want success", tt.name, err)
			}
			if err := f.assigner().Del(attA); err != nil {
				t.Fatalf("second Del: %v, want success", err)
			}
			d := readDisk(t, f.stateDir())
			if len(d.records) != 0 || len(d.index) != 0 || d.journal {
				t.Errorf("Del left state behind: %d records, index %v, journal %v", len(d.records), d.index, d.journal)
			}
			if got := f.holderAddrs(); len(got) != 0 {
				t.Errorf("Del left %v on the holder", got)
			}
		})
	}
}

func TestDelLeavesAHolderThatStoppedBeingOursAlone(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Alias = "taken over by the admin" })
	host := f.k.snapshot(t)

	if err := f.assigner().Del(attA); err != nil {
		t.Fatalf("Del: %v, want success: the record is ours to forget", err)
	}
	if f.k.snapshot(t) != host {
		t.Errorf("Del removed addresses from a device that is no longer marked as ours")
	}
	if d := readDisk(t, f.stateDir()); len(d.records) != 0 || len(d.index) != 0 {
		t.Errorf("Del kept the record or index: %v %v", d.records, d.index)
	}
}

func TestAddTakesOverAnAddressLeftOnItsOwnHolder(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4b)
	f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Addrs[v6a] = true })

	placed := f.add(attA, v6a)
	if len(placed) != 1 || placed[0].Uplink.Name != "eth0" || !placed[0].First {
		t.Errorf("Add placed %+v, want %s first held, on eth0 from the main table's route", placed, v6a)
	}
	assertState(t, f, holdings{attA: {v6a}, attB: {v4b}})
}
