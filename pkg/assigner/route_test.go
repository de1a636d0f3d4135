package assigner

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/host"
)

const testProto = 200

// routeFixture holds IPs as routes of protocol testProto.
func routeFixture(t testing.TB) *fixture {
	f := newFixture(t)
	f.opts.RouteProtocol = testProto
	return f
}

// assertRouted checks that the holder carries exactly ips, each as a host
// route of testProto and none as an address, with a proxy entry on eth0
// for each, IPv4 and IPv6 alike.
func assertRouted(t *testing.T, f *fixture, ips ...netip.Addr) {
	t.Helper()
	want := map[netip.Addr]int{}
	for _, ip := range ips {
		want[ip] = testProto
	}
	l := f.k.link(t, f.opts.Device)
	var got map[netip.Addr]int
	if l != nil {
		got = l.Routes
		if len(l.Addrs) != 0 {
			t.Errorf("holder carries addresses %v in route mode, want none", sortedAddrs(l.Addrs))
		}
	}
	if len(got)+len(want) > 0 && !maps.Equal(got, want) {
		t.Errorf("holder's routes are %v, want %v", got, want)
	}
	if p, w := f.k.proxies(t, "eth0"), sorted(ips); !slices.Equal(p, w) {
		t.Errorf("proxy entries on eth0 are %v, want one per IP held as a route, both families: %v", p, w)
	}
}

func TestRouteModeHoldsEachIPAsAHostRouteWithProxyEntriesOfBothFamilies(t *testing.T) {
	f := routeFixture(t)
	f.add(attA, v4a, v6a)
	assertRouted(t, f, v4a, v6a)
	d := readDisk(t, f.stateDir())
	for _, ip := range []netip.Addr{v4a, v6a} {
		if d.index[ip].Route != testProto {
			t.Errorf("index of %s says held as %v, want a route of %d", ip, d.index[ip].Route, testProto)
		}
	}
	if r := d.records[attA.Key()]; r.Route != testProto {
		t.Errorf("record of %s asks for %v, want a route of %d", attA, r.Route, testProto)
	}
	f.add(attB, v4a)
	f.del(attA)
	assertRouted(t, f, v4a)
	f.del(attB)
	assertRouted(t, f)
	assertState(t, f, holdings{})
}

func TestRouteModeNeedsForwardingNotArpIgnoreZero(t *testing.T) {
	f := routeFixture(t)
	for _, dev := range []string{"all", "eth0"} {
		f.k.setSysctl("ipv4/conf/"+dev+"/arp_ignore", 1)
	}
	f.add(attA, v4a)
	if err := f.assigner().Ready(true, false); err != nil {
		t.Errorf("Ready in route mode with arp_ignore 1: %v", err)
	}
	f.k.setSysctl("ipv4/conf/eth0/forwarding", 0)
	_, err := f.assigner().Add(attB, []netip.Addr{v4b}, nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "ipv4.conf.eth0.forwarding") {
		t.Errorf("Add in route mode without IPv4 forwarding = %v, want ErrUnreachable naming the sysctl", err)
	}
	f.k.setSysctl("ipv4/conf/all/forwarding", 0) // no default route: Ready judges "all"
	if err := f.assigner().Ready(true, false); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Ready in route mode without IPv4 forwarding = %v, want ErrUnreachable", err)
	}
}

func TestRouteModeRefusesAnIPAnotherInterfaceHasAHostRouteTo(t *testing.T) {
	f := routeFixture(t)
	f.k.setRoute(v4a, host.Route{Dev: eth1Index, Prefix: netip.PrefixFrom(v4a, 32), Connected: true})
	_, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "host route") {
		t.Errorf("Add of an IP routed to eth1 by a host route = %v, want ErrRefused", err)
	}
	assertState(t, f, holdings{})
}

func TestCheckInRouteModeReportsAMissingRouteOrProxyEntry(t *testing.T) {
	f := routeFixture(t)
	f.add(attA, v4a, v6a)
	if _, err := f.assigner().Check(attA); err != nil {
		t.Fatalf("Check right after a route-mode Add: %v", err)
	}
	f.k.removeProxy(t, "eth0", v4a)
	if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), "proxy") {
		t.Errorf("Check with v4a's proxy entry gone = %v, want drift naming it", err)
	}
	f.add(attA, v4a, v6a)
	f.k.changeLink(t, f.opts.Device, func(l *fakeLink) { delete(l.Routes, v6a) })
	if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), "no route") {
		t.Errorf("Check with v6a's route gone = %v, want drift naming it", err)
	}
	f.k.changeLink(t, f.opts.Device, func(l *fakeLink) { l.Routes[v6a] = 99 })
	if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) {
		t.Errorf("Check with v6a's route of another protocol = %v, want drift", err)
	}
}

func TestGCInRouteModeRestoresRoutesAndDropsStrays(t *testing.T) {
	f := routeFixture(t)
	f.add(attA, v4a, v6a)
	stray := netip.MustParseAddr("198.51.100.9")
	f.k.changeLink(t, f.opts.Device, func(l *fakeLink) {
		delete(l.Routes, v4a)
		l.Routes[stray] = testProto
	})
	f.k.mustInspect(t, func(h *fakeHost) { h.Proxies["eth0"][stray] = true })
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	assertRouted(t, f, v4a, v6a)
	rep, err := f.assigner().Report()
	if err != nil || len(rep.Drift) != 0 {
		t.Errorf("report after GC: drift %q, error %v", rep.Drift, err)
	}
	if len(rep.IPs) != 2 || rep.IPs[0].Hold != "route" || rep.IPs[0].Route != testProto || !rep.IPs[0].OnDevice {
		t.Errorf("report says %+v, want both IPs held as routes of %d, on the holder", rep.IPs, testProto)
	}
}

func TestReportNamesARouteModeIPsMissingRoute(t *testing.T) {
	f := routeFixture(t)
	f.add(attA, v4a)
	f.k.changeLink(t, f.opts.Device, func(l *fakeLink) { delete(l.Routes, v4a) })
	rep, err := f.assigner().Report()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drift) != 1 || !strings.Contains(rep.Drift[0], "held as a route") {
		t.Errorf("report's drift %q, want the missing route named", rep.Drift)
	}
}

func TestHoldSwitchesOnlyWhenEveryHolderAsksTheOtherWay(t *testing.T) {
	f := newFixture(t) // address mode
	f.add(attA, v4a)
	f.opts.RouteProtocol = testProto
	f.add(attB, v4a)
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Fatalf("a second holder asking for a route switched the IP: holder has addresses %v", got)
	}
	if err := f.assigner().GC("net1", []Attachment{attA, attB}); err != nil {
		t.Fatal(err)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("GC switched an IP whose holders disagree: holder has %v", got)
	}
	f.add(attA, v4a) // attA asks for a route too now
	if err := f.assigner().GC("net1", []Attachment{attA, attB}); err != nil {
		t.Fatal(err)
	}
	assertRouted(t, f, v4a)
}

func TestReAddOfTheOnlyHolderSwitchesTheHoldAndUndoSwitchesBack(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.opts.RouteProtocol = testProto
	f.add(attA, v4a, v6a)
	assertRouted(t, f, v4a, v6a)

	f.opts.RouteProtocol = 0
	failing := errors.New("announcing failed")
	_, err := f.assigner().Add(attA, []netip.Addr{v4a, v6a}, hooks{announce: func([]announce.Target) error { return failing }})
	if !errors.Is(err, failing) {
		t.Fatalf("Add with a failing announcement = %v", err)
	}
	assertRouted(t, f, v4a, v6a) // the failed switch to addresses is undone

	f.add(attA, v4a, v6a)
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a, v6a}) {
		t.Errorf("switch back to addresses: holder has %v", got)
	}
	if l := f.k.link(t, f.opts.Device); len(l.Routes) != 0 {
		t.Errorf("switch back to addresses left routes %v", l.Routes)
	}
	if p := f.k.proxies(t, "eth0"); !slices.Equal(p, []netip.Addr{v6a}) {
		t.Errorf("switch back to addresses left proxy entries %v, want only the IPv6 one", p)
	}
}

// A failed re-ADD that switches an IPv4 address to a route finds another
// program's proxy entry on the uplink: undoing it takes the route off as
// the re-ADD held it, keeping that entry, and gives the IP back as an
// address, which needs no entry.
func TestAnUndoneSwitchToARouteKeepsTheOtherProgramsProxyEntry(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.k.inspect(func(h *fakeHost) error {
		h.Proxies["eth0"] = map[netip.Addr]bool{v4a: true}
		return nil
	})
	f.opts.RouteProtocol = testProto
	failing := errors.New("announcing failed")
	if _, err := f.assigner().Add(attA, []netip.Addr{v4a}, hooks{announce: func([]announce.Target) error { return failing }}); !errors.Is(err, failing) {
		t.Fatalf("Add with a failing announcement = %v", err)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("after the undone switch the holder has addresses %v; want %s", got, v4a)
	}
	f.opts.RouteProtocol = 0
	f.del(attA)
	if p := f.k.proxies(t, "eth0"); !slices.Equal(p, []netip.Addr{v4a}) {
		t.Errorf("after the undone switch and DEL the proxy entries on eth0 are %v; want the other program's for %s", p, v4a)
	}
}
