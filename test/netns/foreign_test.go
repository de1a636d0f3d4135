package netns

import (
	"strings"
	"syscall"
	"testing"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// Other programs' objects beside ours: a container address that is an
// external IP we hold, another program's host route to an IP, another
// program's proxy neighbour entries. An ADD never returns 0 without
// holding what it was asked, and nothing of theirs is changed.

// routes is the node's main table of both families, and every proxy
// neighbour entry of both: what another program owns there.
func (h *host) routesAndProxies() string {
	h.t.Helper()
	return h.stdout("ip -n %[1]s route show table main; ip -n %[1]s -6 route show table main; ip -n %[1]s neigh show proxy; ip -n %[1]s -6 neigh show proxy", h.name)
}

// proxyEntry says whether the node has a proxy neighbour entry for ip on
// uplink0, in either family.
func (h *host) proxyEntry(ip string) bool {
	h.t.Helper()
	fam := "-4"
	if strings.Contains(ip, ":") {
		fam = "-6"
	}
	for _, line := range lines(h.stdout("ip -n %s %s neigh show proxy dev uplink0", h.name, fam)) {
		if strings.Fields(line)[0] == ip {
			return true
		}
	}
	return false
}

// A container whose address (prevResult) is another pod's external IP
// would have the new IP DNATed to that external IP, and the node's own
// flows SNATed from it. Refused in both hold modes, IPv4 and IPv6, with
// nothing changed: an IP held as a route is no address of the node, so the
// check that refused it in address mode did not see it in route mode.
func TestAContainerAddressThatIsAHeldExternalIPIsRefusedInEitherHoldMode(t *testing.T) {
	for _, hold := range []string{"route", "address"} {
		for _, fam := range []struct{ name, held, asked, v4, v6 string }{
			{"IPv4", "192.0.2.10", "192.0.2.11", "192.0.2.10/24", "fd00:1::5/64"},
			{"IPv6", "2001:db8:1::10", "2001:db8:1::11", "10.1.0.5/24", "2001:db8:1::10/64"},
		} {
			t.Run(hold+"/"+fam.name, func(t *testing.T) {
				h := newHost(t)
				h.forwardIPv4()
				a := h.netConf("1.0.0", map[string]any{"traffic": "both", "hold": hold, "runtimeConfig": runtimeIPs(fam.held)})
				h.run(attach("ADD", "a", a)).mustOK(t, "ADD a")
				b := h.netConf("1.0.0", map[string]any{"traffic": "both", "hold": hold, "runtimeConfig": runtimeIPs(fam.asked)})
				b["prevResult"] = prevResultGiving(t, "1.0.0", fam.v4, fam.v6)
				before, table := h.view(), h.nft("list table inet external-ip")
				h.run(attach("ADD", "b", b)).mustFail(t, "ADD b, whose container address is a's external IP", 7, "prevResult", fam.held, "eip0")
				h.mustBeUnchanged(t, "the refused ADD", before)
				if got := h.nft("list table inet external-ip"); got != table {
					t.Errorf("the refused ADD changed the table:\n%s\nwas:\n%s", got, table)
				}
			})
		}
	}
}

// Another program's host route to the IP in the main table (a static
// route, a route a routing daemon learned), through a gateway, at a
// metric ours cannot beat (IPv4 0, IPv6 1024, as ours): the kernel
// answers our route's ADD with EEXIST, which was taken for ours, and the
// ADD returned 0 holding nothing. Refused with 7 naming the route, which
// stays; at a higher metric ours wins, so the IP is held and the other
// route is kept through ADD and DEL.
func TestAnotherProgramsHostRouteToTheIPIsRefusedNamingItOrBeatenAndKept(t *testing.T) {
	for _, tt := range []struct {
		name, ip, route string
		held            bool
	}{
		{"IPv4 static route, metric 0", "192.0.2.30", "192.0.2.30/32 via 192.0.2.2 dev uplink0 proto static", false},
		{"IPv6 learned route, metric 1024", "2001:db8:1::30", "2001:db8:1::30/128 via 2001:db8:1::2 dev uplink0 proto 186", false},
		{"IPv6 learned route, metric 20", "2001:db8:1::30", "2001:db8:1::30/128 via 2001:db8:1::2 dev uplink0 proto 186 metric 20", false},
		{"IPv4 learned route, metric 20", "192.0.2.30", "192.0.2.30/32 via 192.0.2.2 dev uplink0 proto 186 metric 20", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			h.forwardIPv4()
			fam := "-4"
			if strings.Contains(tt.ip, ":") {
				fam = "-6"
			}
			h.inNode("ip %s route add %s", fam, tt.route)
			theirs := strings.TrimSpace(h.inNode("ip %s route show %s", fam, tt.ip))
			if theirs == "" {
				t.Fatalf("setup: the other program's route %s is not in the main table", tt.route)
			}
			conf := h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs(tt.ip)})
			before, routes := h.settledView(), h.routesAndProxies()
			r := h.run(attach("ADD", "a", conf))
			if !tt.held {
				r.mustFail(t, "ADD of an IP another program routes", 7, "runtimeConfig.externalIPs[0]", tt.ip, "via", "uplink0")
				t.Logf("refused: %s", r.msg)
				h.mustBeUnchanged(t, "the refused ADD", before)
				if got := h.routesAndProxies(); got != routes {
					t.Errorf("the refused ADD changed the routes or proxy entries:\n%s\nwas:\n%s", got, routes)
				}
				return
			}
			r.mustOK(t, "ADD of an IP another program routes at a higher metric")
			if route, proxy := h.routeState(tt.ip); !route || !proxy {
				t.Errorf("after ADD: our route %v, proxy entry %v; want both", route, proxy)
			}
			h.run(attach("CHECK", "a", conf)).mustOK(t, "CHECK")
			h.run(attach("DEL", "a", conf)).mustOK(t, "DEL")
			if got := strings.TrimSpace(h.inNode("ip %s route show %s", fam, tt.ip)); got != theirs {
				t.Errorf("after ADD and DEL the other program's route is %q, want %q", got, theirs)
			}
		})
	}
}

// Another program's proxy neighbour entries for IPs we then hold (IPv4
// and IPv6 as routes, IPv6 as an address) are kept by DEL, and by the
// next invocation that rolls back an ADD killed at any step: a proxy
// entry carries no owner, so which were there before our ADD is kept in
// the journal and the index. An IP whose entry we made loses it at DEL,
// as before (the control).
func TestAnotherProgramsProxyEntriesSurviveOurDelAndAKilledAdd(t *testing.T) {
	theirs := []string{"192.0.2.40", "2001:db8:1::40"}
	ours := []string{"192.0.2.41", "2001:db8:1::41"}
	for _, hold := range []string{"route", "address"} {
		t.Run(hold, func(t *testing.T) {
			h := newHost(t)
			h.forwardIPv4()
			for _, ip := range theirs {
				h.inNode("ip neigh add proxy %s dev uplink0", ip)
			}
			conf := h.netConf("1.0.0", map[string]any{"hold": hold, "runtimeConfig": runtimeIPs(append(theirs, ours...)...)})
			h.run(attach("ADD", "a", conf)).mustOK(t, "ADD a")
			h.run(attach("CHECK", "a", conf)).mustOK(t, "CHECK a")
			h.run(attach("DEL", "a", conf)).mustOK(t, "DEL a")
			h.theirsKeptOursGone(t, "after DEL", theirs, ours, hold)
			for _, step := range []string{"record", "index", "address", "done"} {
				r := h.runWith(faultBinary(t), attach("ADD", "k", conf), assigner.CrashEnv+"="+step)
				if r.err == nil {
					t.Fatalf("the ADD to be killed at %s succeeded", step)
				}
				h.run(attach("DEL", "k", conf)).mustOK(t, "DEL after the ADD killed at "+step)
				h.theirsKeptOursGone(t, "after an ADD killed at "+step+" and rolled back", theirs, ours, hold)
			}
		})
	}
}

// A re-ADD that drops an IP whose proxy entry another program made, and
// that is then rolled back (killed, then undone by the next invocation),
// must leave the index saying the entry is another program's: the DEL
// that follows must keep it.
func TestAnotherProgramsProxyEntrySurvivesARolledBackReAddThatDroppedItsIP(t *testing.T) {
	for _, tt := range []struct{ hold, theirs, next string }{
		{"route", "192.0.2.40", "192.0.2.42"},
		{"address", "2001:db8:1::40", "2001:db8:1::42"},
	} {
		for _, step := range []string{"index", "done"} {
			t.Run(tt.hold+"/"+step, func(t *testing.T) {
				h := newHost(t)
				h.forwardIPv4()
				h.inNode("ip neigh add proxy %s dev uplink0", tt.theirs)
				first := h.netConf("1.0.0", map[string]any{"hold": tt.hold, "runtimeConfig": runtimeIPs(tt.theirs)})
				h.run(attach("ADD", "a", first)).mustOK(t, "ADD a")
				again := h.netConf("1.0.0", map[string]any{"hold": tt.hold, "runtimeConfig": runtimeIPs(tt.next)})
				if r := h.runWith(faultBinary(t), attach("ADD", "a", again), assigner.CrashEnv+"="+step); r.err == nil {
					t.Fatalf("the re-ADD to be killed at %s succeeded", step)
				}
				h.run(attach("DEL", "a", first)).mustOK(t, "DEL a after the killed re-ADD")
				if !h.proxyEntry(tt.theirs) {
					t.Errorf("the other program's proxy entry for %s is gone after a rolled-back re-ADD and DEL", tt.theirs)
				}
			})
		}
	}
}

// theirsKeptOursGone fails unless every IP of theirs still has its proxy
// entry on uplink0 and no IP of ours has one that we would have made.
func (h *host) theirsKeptOursGone(t *testing.T, when string, theirs, ours []string, hold string) {
	t.Helper()
	for _, ip := range theirs {
		if !h.proxyEntry(ip) {
			t.Errorf("%s: the other program's proxy entry for %s is gone", when, ip)
		}
	}
	for _, ip := range ours {
		if h.proxyEntry(ip) {
			t.Errorf("%s: the proxy entry external-ip made for %s (%s) is still there", when, ip, hold)
		}
	}
}

// The other program's host route comes after screening, while the ADD
// holds the lock (paused there, faultinject): the kernel's EEXIST for our
// route is then told from ours by asking which route the kernel uses, and
// the ADD fails with 7 naming it and is undone, leaving the route, the
// holder and the state as they were.
func TestAHostRouteOfAnotherProgramComingAfterScreeningFailsTheAddAndIsKept(t *testing.T) {
	for _, tt := range []struct{ ip, route string }{
		{"192.0.2.31", "192.0.2.31/32 via 192.0.2.2 dev uplink0 proto static"},
		{"2001:db8:1::31", "2001:db8:1::31/128 via 2001:db8:1::2 dev uplink0 proto 186"},
	} {
		t.Run(tt.ip, func(t *testing.T) {
			h := newHost(t)
			h.forwardIPv4()
			h.run(attach("ADD", "c0", h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs("192.0.2.50", "2001:db8:1::50")}))).mustOK(t, "ADD of a bystander")
			conf := h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs(tt.ip)})
			before := h.view()
			add := h.start(faultBinary(t), attach("ADD", "a", conf), assigner.PauseEnv+"=record")
			stopped(t, add.cmd.Process.Pid)
			h.inNode("ip route add %s", tt.route)
			routes := h.routesAndProxies()
			add.cmd.Process.Signal(syscall.SIGCONT)
			add.wait().mustFail(t, "ADD whose IP another program routed meanwhile", 7, tt.ip, "via", "uplink0")
			h.mustBeUnchanged(t, "the failed ADD", before)
			if got := h.routesAndProxies(); got != routes {
				t.Errorf("the failed ADD changed the routes or proxy entries:\n%s\nwas:\n%s", got, routes)
			}
		})
	}
}
