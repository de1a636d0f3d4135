package netns

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

// These tests hold external IPs as routes (the default when ingress is
// steered) on nodes with real containers.

// forwardIPv4 turns IPv4 forwarding on in the node: a steered IP is held
// as a route by default, which the kernel answers ARP for only on an
// uplink that forwards (as a steering node must anyway, to reach its
// containers).
func (h *host) forwardIPv4() {
	h.t.Helper()
	h.inNode("sysctl -qw net.ipv4.ip_forward=1")
}

// routeState is what the node's kernel carries for ext in route mode.
func (h *host) routeState(ext string) (route, proxy bool) {
	h.t.Helper()
	fam := "-4"
	if strings.Contains(ext, ":") {
		fam = "-6"
	}
	r := h.inNode("ip %s route show table main proto 200 dev eip0", fam)
	p := h.inNode("ip %s neigh show proxy dev uplink0", fam)
	return strings.Contains(" "+r, " "+ext+" ") || strings.HasPrefix(r, ext+" "), strings.Contains(p, ext+" ")
}

// answerTimes solicits ext's link-layer address from the LAN n times, one
// request at a time (ARP for IPv4, a neighbour solicitation for IPv6), and
// returns the slowest answer and the address answered. A broadcast
// solicitation of a proxied address waits up to proxy_delay (0.8 s by
// default) unless the uplink's proxy_delay is 0.
func (h *host) answerTimes(ext string, n int) (time.Duration, net.HardwareAddr, error) {
	h.t.Helper()
	var worst time.Duration
	var mac net.HardwareAddr
	err := inNS(h.t, nsPath(h.lan), func() error {
		ifi, err := net.InterfaceByName("lan0")
		if err != nil {
			return err
		}
		ip := netip.MustParseAddr(ext)
		for range n {
			start := time.Now()
			if ip.Is4() {
				mac, err = resolveARP(ifi, ip)
			} else {
				mac, err = solicit(ifi, ip)
			}
			if err != nil {
				return err
			}
			worst = max(worst, time.Since(start))
		}
		return nil
	})
	return worst, mac, err
}

func resolveARP(ifi *net.Interface, ip netip.Addr) (net.HardwareAddr, error) {
	c, err := arp.Dial(ifi)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	return c.Resolve(ip)
}

func solicit(ifi *net.Interface, ip netip.Addr) (net.HardwareAddr, error) {
	return solicitWithin(ifi, ip, 2*time.Second)
}

// solicitWithin sends one neighbour solicitation for ip and waits up to
// wait for its answer.
func solicitWithin(ifi *net.Interface, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := solicitNAs(ifi, ip, wait, func(m net.HardwareAddr) bool { mac = m; return true })
	if err == nil && mac == nil {
		err = fmt.Errorf("neighbour advertisement for %s carries no target link-layer address", ip)
	}
	return mac, err
}

// solicitNAs sends one neighbour solicitation for ip from ifi and hands
// each advertisement for ip to each (its target link-layer address, nil
// without one) until each returns true; past wait it returns the read's
// deadline error.
func solicitNAs(ifi *net.Interface, ip netip.Addr, wait time.Duration, each func(net.HardwareAddr) bool) error {
	c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return err
	}
	defer c.Close()
	snm, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip, Options: []ndp.Option{
		&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: ifi.HardwareAddr},
	}}
	c.SetDeadline(time.Now().Add(wait))
	if err := c.WriteTo(ns, nil, snm); err != nil {
		return err
	}
	for {
		m, _, _, err := c.ReadFrom()
		if err != nil {
			return err
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress != ip {
			continue
		}
		var mac net.HardwareAddr
		for _, o := range na.Options {
			if l, ok := o.(*ndp.LinkLayerAddress); ok && l.Direction == ndp.Target {
				mac = l.Addr
			}
		}
		if each(mac) {
			return nil
		}
	}
}

func TestRouteModeIsAnsweredAtOnceOnTheUplinkWhateverArpIgnoreSays(t *testing.T) {
	// 1 with arp_announce 2 is IPVS's strictARP (kube-proxy, MetalLB, kube-vip).
	for _, ignore := range []int{0, 1, 2, 8} {
		t.Run(fmt.Sprintf("arp_ignore %d", ignore), func(t *testing.T) {
			w := newWorld(t, "both")
			w.h.inNode("sysctl -qw net.ipv4.conf.all.arp_ignore=%d net.ipv4.conf.uplink0.arp_ignore=%[1]d net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.uplink0.arp_announce=2", ignore)
			a := w.add("a", extV4, extV6)
			if ips := w.h.holderIPs("eip0"); len(ips) != 0 {
				t.Errorf("route mode put addresses %v on the holder", ips)
			}
			uplinkMAC := w.h.linkMAC(w.h.name, "uplink0")
			serve(t, a.netns, "a", svPort)
			families(t, func(t *testing.T, ext, lan string, _ func(*container) string) {
				if r, p := w.h.routeState(ext); !r || !p {
					t.Fatalf("after ADD: route proto 200 dev eip0 %v, proxy entry on uplink0 %v; want both", r, p)
				}
				// The default proxy_delay delays a broadcast solicitation by a
				// random 0 to 0.8 s: all 10 under 0.3 s has odds of 0.375^10.
				worst, mac, err := w.h.answerTimes(ext, 10)
				if err != nil {
					t.Fatalf("soliciting %s from the LAN: %v", ext, err)
				}
				if mac.String() != uplinkMAC {
					t.Errorf("%s answered with %s, want the uplink's %s", ext, mac, uplinkMAC)
				}
				if worst > 300*time.Millisecond {
					t.Errorf("slowest of 10 answers for %s took %v, want at once (proxy_delay 0)", ext, worst)
				}
				mustAsk(t, "LAN to the external IP over TCP", nsPath(w.h.lan), "tcp", ext, svPort, "a", lan)
				mustAsk(t, "LAN to the external IP over UDP", nsPath(w.h.lan), "udp", ext, svPort, "a", lan)
			})
			if err := w.check(a); err != nil {
				t.Errorf("CHECK in route mode: %v", err)
			}
		})
	}
}

func TestRouteModeNeverReachesAHostListenerOnAWildcardAddress(t *testing.T) {
	const port = "7070"
	for _, hold := range []string{"route", "address"} {
		t.Run(hold, func(t *testing.T) {
			w := newWorldWith(t, "both", map[string]any{"hold": hold})
			w.add("a", extV4, extV6)
			serve(t, nsPath(w.h.name), "node", port) // on :7070, every address
			// The rules gone (flushed by hand, or not yet made): route mode
			// routes the IP to the holder, where it is dropped.
			w.h.inNode("nft delete table inet external-ip")
			for _, ext := range []string{extV4, extV6} {
				name, _, err := ask(t, nsPath(w.h.lan), "tcp", ext, port)
				switch {
				case hold == "route" && err == nil:
					t.Errorf("route mode: LAN to %s port %s was answered by %s, want no answer", ext, port, name)
				case hold == "address" && name != "node":
					// The control: an address of the node is the node's.
					t.Errorf("address mode: LAN to %s port %s = %q, %v; want the node's listener", ext, port, name, err)
				}
			}
		})
	}
}

// routeStatus is the part of `external-ip status --json` about the hold.
type routeStatus struct {
	IPs []struct {
		IP       string `json:"ip"`
		Hold     string `json:"hold"`
		Route    int    `json:"routeProtocol"`
		OnDevice bool   `json:"onDevice"`
		Proxy    *bool  `json:"proxyNeighbour"`
	} `json:"ips"`
	Drift []string `json:"drift"`
}

func (h *host) routeStatus() routeStatus {
	h.t.Helper()
	var reps []routeStatus
	out := h.inNode("%s status --json --data-dir %s", pluginBin, h.dataDir)
	if err := json.Unmarshal([]byte(out), &reps); err != nil || len(reps) != 1 {
		h.t.Fatalf("status --json printed %q: %v", out, err)
	}
	return reps[0]
}

func TestRouteModeCheckRepairStatusAndDelCoverTheRouteAndItsProxyEntries(t *testing.T) {
	w := newWorldWith(t, "both", map[string]any{"routeProtocol": 200})
	a := w.add("a", extV4, extV6)
	st := w.h.routeStatus()
	if len(st.Drift) != 0 || len(st.IPs) != 2 {
		t.Fatalf("status after ADD: %+v", st)
	}
	for _, ip := range st.IPs {
		if ip.Hold != "route" || ip.Route != 200 || !ip.OnDevice || ip.Proxy == nil || !*ip.Proxy {
			t.Errorf("status says %+v, want held as a route of 200 with its proxy entry", ip)
		}
	}
	w.h.inNode("ip route del %s/32 dev eip0", extV4)
	w.h.inNode("ip -6 neigh del proxy %s dev uplink0", extV6)
	if err := w.check(a); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("CHECK with the route gone = %v, want it named", err)
	}
	if st := w.h.routeStatus(); len(st.Drift) != 2 {
		t.Errorf("status names drift %q, want the route and the proxy entry", st.Drift)
	}
	w.h.inNode("%s repair --data-dir %s", pluginBin, w.h.dataDir)
	for _, ext := range []string{extV4, extV6} {
		if r, p := w.h.routeState(ext); !r || !p {
			t.Errorf("after repair %s: route %v, proxy entry %v; want both", ext, r, p)
		}
	}
	if err := w.check(a); err != nil {
		t.Errorf("CHECK after repair: %v", err)
	}
	w.del(a)
	for _, ext := range []string{extV4, extV6} {
		if r, p := w.h.routeState(ext); r || p {
			t.Errorf("after DEL %s: route %v, proxy entry %v; want neither", ext, r, p)
		}
	}
}

// A node upgraded from a version whose steering rules were guarded by
// `fib daddr type local` (layout 1, as many rules as today's, untagged)
// steers no IP held as a route until the table is made anew: the next ADD
// that steers makes it at once, rather than the next repair.
func TestRouteModeAddMakesATableOfTheEarlierLayoutAnewAtOnce(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4)
	serve(t, a.netns, "a", svPort)
	mustAsk(t, "LAN to a's external IP before the upgrade's table", nsPath(w.h.lan), "tcp", extV4, svPort, "a", lanV4)
	for _, chain := range []string{"prerouting", "output"} {
		w.h.nft("flush chain inet external-ip %s", chain)
		for _, r := range []string{
			"fib daddr type local ip daddr vmap @in4",
			"fib daddr type local dnat ip to ip daddr map @dnat4",
			"fib daddr type local ip6 daddr vmap @in6",
			"fib daddr type local dnat ip6 to ip6 daddr map @dnat6",
		} {
			w.h.nft("add rule inet external-ip %s %s", chain, r)
		}
	}
	w.h.nft("delete chain inet external-ip layout-6-0f000000") // no earlier version made it
	// The control: the earlier layout does not steer an IP held as a route.
	if name, _, err := ask(t, nsPath(w.h.lan), "tcp", extV4, svPort); err == nil {
		t.Fatalf("with the earlier layout's fib guard, LAN to %s was answered by %s; the test models nothing", extV4, name)
	}
	const extB = "192.0.2.11"
	b := w.add("b", extB)
	serve(t, b.netns, "b", svPort)
	if text := w.h.nft("list table inet external-ip"); strings.Contains(text, "fib ") {
		t.Errorf("after ADD the table keeps the earlier layout's guard:\n%s", text)
	}
	mustAsk(t, "LAN to b's external IP, ADDed on the earlier layout", nsPath(w.h.lan), "tcp", extB, svPort, "b", lanV4)
	mustAsk(t, "LAN to a's external IP, after b's ADD", nsPath(w.h.lan), "tcp", extV4, svPort, "a", lanV4)
	for _, c := range []*container{a, b} {
		if err := w.check(c); err != nil {
			t.Errorf("CHECK of %s after the ADD on the earlier layout: %v", c.id, err)
		}
	}
}

// arpProbeFor matches RFC 5227 ARP probes for ip: requests from sender IP
// 0.0.0.0 for target ip (which arpAbout, matching the sender, leaves out).
func arpProbeFor(ip netip.Addr) func([]byte) bool {
	return func(b []byte) bool {
		return len(b) >= 42 && binary.BigEndian.Uint16(b[12:14]) == unix.ETH_P_ARP &&
			binary.BigEndian.Uint16(b[20:22]) == uint16(arp.OperationRequest) &&
			bytes.Equal(b[28:32], make([]byte, 4)) && bytes.Equal(b[38:42], ip.AsSlice())
	}
}

// announce.count 0 turns the announcements off, for IPs that are on no
// uplink's subnet (a routed fabric); 1 sends one round. The conflict probe
// is its own key and still asks. In route mode the IP is still answered on
// the uplink, by its proxy entry, when asked.
func TestRouteModeAnnouncesNothingWithAnnounceCountZeroAndOneRoundWithOne(t *testing.T) {
	ip4, ip6 := netip.MustParseAddr(extV4), netip.MustParseAddr(extV6)
	for _, count := range []int{0, 1} {
		t.Run(fmt.Sprintf("count %d", count), func(t *testing.T) {
			w := newWorldWith(t, "both", map[string]any{"announce": map[string]any{"count": count}, "conflictProbe": "150ms"})
			frames := captureOn(t, w.h.lan, "lan0")
			a := w.add("a", extV4, extV6)
			// With count 0 nothing can meet the wants: the whole 1.5 s is
			// watched, past a first round's and a second's time (1.1 s).
			got := collectWire(frames, 1500*time.Millisecond,
				wireWant{arpAbout(ip4, 0), max(2*count, 1)}, wireWant{naFor(ip6), max(count, 1)}, wireWant{arpProbeFor(ip4), 1})
			if len(got[0]) != 2*count || len(got[1]) != count {
				t.Errorf("announce.count %d: the LAN received %d gratuitous ARP frames for %s and %d NAs for %s, want %d and %d",
					count, len(got[0]), ip4, len(got[1]), ip6, 2*count, count)
			}
			if len(got[2]) == 0 {
				t.Errorf("announce.count %d: the LAN received no conflict probe for %s, want the probe on (conflictProbe 150ms)", count, ip4)
			}
			serve(t, a.netns, "a", svPort)
			mustAsk(t, "LAN to the external IP over TCP", nsPath(w.h.lan), "tcp", extV4, svPort, "a", lanV4)
			mustAsk(t, "LAN to the external IPv6 over TCP", nsPath(w.h.lan), "tcp", extV6, svPort, "a", lanV6)
			if err := w.check(a); err != nil {
				t.Errorf("CHECK with announce.count %d: %v", count, err)
			}
			conf := w.h.gcConf("steer", nil, map[string]any{"traffic": "both", "announce": map[string]any{"count": count}})
			w.h.run(call{command: "STATUS", conf: conf}).mustOK(t, fmt.Sprintf("STATUS with announce.count %d", count))
		})
	}
}
