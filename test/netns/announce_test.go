package netns

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/sink"
	"github.com/external-ip/external-ip/test/wire"
)

// wireFrame is one frame a LAN interface received, stamped on arrival.
type wireFrame = wire.Frame

// captureOn receives every frame reaching dev in namespace netns, from now
// until t ends. The socket is opened inside netns and stays bound to it.
func captureOn(t *testing.T, netns, dev string) <-chan wireFrame {
	t.Helper()
	n, err := ns.GetNS(filepath.Join("/var/run/netns", netns))
	if err != nil {
		t.Fatalf("opening namespace %s: %v", netns, err)
	}
	defer n.Close()
	var c *packet.Conn
	err = n.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(dev)
		if err == nil {
			c, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		}
		return err
	})
	if err != nil {
		t.Fatalf("capturing on %s in %s: %v", dev, netns, err)
	}
	t.Cleanup(func() { c.Close() })
	return wire.Stream(c)
}

// wireWant is a kind of frame and how many of it a test waits for.
type wireWant struct {
	match func([]byte) bool
	n     int
}

// collectWire sorts frames into one list per want until every want has its
// count or timeout passes, and returns what it has.
func collectWire(frames <-chan wireFrame, timeout time.Duration, wants ...wireWant) [][]wireFrame {
	got := make([][]wireFrame, len(wants))
	done := func() bool {
		for i, w := range wants {
			if len(got[i]) < w.n {
				return false
			}
		}
		return true
	}
	deadline := time.After(timeout)
	for !done() {
		select {
		case f, ok := <-frames:
			if !ok {
				return got
			}
			for i, w := range wants {
				if w.match(f.Data) {
					got[i] = append(got[i], f)
				}
			}
		case <-deadline:
			return got
		}
	}
	return got
}

// arpAbout matches ARP frames whose sender IP is ip, optionally only of op.
func arpAbout(ip netip.Addr, op arp.Operation) func([]byte) bool {
	return func(b []byte) bool {
		return len(b) >= 42 && binary.BigEndian.Uint16(b[12:14]) == unix.ETH_P_ARP &&
			bytes.Equal(b[28:32], ip.AsSlice()) && (op == 0 || binary.BigEndian.Uint16(b[20:22]) == uint16(op))
	}
}

// naFor matches frames carrying an ICMPv6 neighbour advertisement for ip.
func naFor(ip netip.Addr) func([]byte) bool {
	return func(b []byte) bool {
		return len(b) >= 78 && binary.BigEndian.Uint16(b[12:14]) == unix.ETH_P_IPV6 &&
			b[20] == unix.IPPROTO_ICMPV6 && b[54] == 136 && bytes.Equal(b[62:78], ip.AsSlice())
	}
}

// uplinkLinkLocal is the node uplink's fe80:: address, the only source RFC
// 4861 allows for an NA.
func (h *host) uplinkLinkLocal(netns string) netip.Addr {
	h.t.Helper()
	f := strings.Fields(h.sh("ip -n %s -6 -o addr show dev uplink0 scope link", netns))
	for i := range f[:len(f)-1] {
		if f[i] == "inet6" {
			return netip.MustParsePrefix(f[i+1]).Addr()
		}
	}
	h.t.Fatalf("uplink0 in %s has no link-local address", netns)
	return netip.Addr{}
}

// waitIPv6Ready waits until dev in netns has a usable link-local address and
// its multicast route. The kernel sets both up only once linkwatch reports
// carrier, which it batches up to a second after the link comes up; until
// then the LAN host drops every multicast (counted as Ip6InNoRoutes),
// neighbour discovery included, and a node cannot send an NA.
func (h *host) waitIPv6Ready(netns, dev string) {
	h.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		routes, _ := h.try("ip -n %s -6 route show table local dev %s", netns, dev)
		ll, _ := h.try("ip -n %s -6 -o addr show dev %s scope link -tentative", netns, dev)
		if strings.Contains(routes, "multicast ff00::/8") && strings.Contains(ll, "fe80:") {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("IPv6 on %s in %s not ready within 3s:\n%s%s", dev, netns, routes, ll)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLAN waits until both ends of newHost's link are ready for IPv6.
func (h *host) waitLAN() {
	h.t.Helper()
	h.waitIPv6Ready(h.name, "uplink0")
	h.waitIPv6Ready(h.lan, "lan0")
}

func TestAnnouncementOfOneAddCarriesRFC5227ARPAndRFC4861NA(t *testing.T) {
	ip4, ip6 := netip.MustParseAddr("192.0.2.60"), netip.MustParseAddr("2001:db8:1::60")
	h := newHost(t)
	h.waitLAN()
	nodeMAC, _ := net.ParseMAC(h.linkMAC(h.name, "uplink0"))
	ll := h.uplinkLinkLocal(h.name)
	router := strings.TrimSpace(h.inNode("sysctl -n net.ipv6.conf.uplink0.forwarding")) != "0"
	frames := captureOn(t, h.lan, "lan0")
	conf := h.netConf("1.0.0", map[string]any{
		"runtimeConfig": runtimeIPs(ip4.String(), ip6.String()),
		"announce":      map[string]any{"count": 1},
	})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")

	got := collectWire(frames, 2*time.Second,
		wireWant{arpAbout(ip4, arp.OperationRequest), 1},
		wireWant{arpAbout(ip4, arp.OperationReply), 1},
		wireWant{naFor(ip6), 1})
	zero := make(net.HardwareAddr, 6)
	for i, want := range []struct {
		what string
		op   arp.Operation
		tha  net.HardwareAddr
	}{{"request", arp.OperationRequest, zero}, {"reply twin", arp.OperationReply, nodeMAC}} {
		if len(got[i]) != 1 {
			t.Fatalf("the LAN received %d gratuitous ARP %ss for %s, want 1", len(got[i]), want.what, ip4)
		}
		checkGratuitousARP(t, want.what, got[i][0].Data, nodeMAC, ip4, want.op, want.tha)
	}
	if len(got[2]) != 1 {
		t.Fatalf("the LAN received %d neighbour advertisements for %s, want 1", len(got[2]), ip6)
	}
	checkUnsolicitedNA(t, got[2][0].Data, nodeMAC, ll, ip6, router)
}

// checkGratuitousARP checks every field of one ARP frame against RFC 5227
// section 2.3.
func checkGratuitousARP(t *testing.T, what string, b []byte, mac net.HardwareAddr, ip netip.Addr, op arp.Operation, tha net.HardwareAddr) {
	t.Helper()
	var eth ethernet.Frame
	var p arp.Packet
	if err := eth.UnmarshalBinary(b); err != nil {
		t.Fatalf("ARP %s: unparsable Ethernet frame % x: %v", what, b, err)
	}
	if err := p.UnmarshalBinary(eth.Payload); err != nil {
		t.Fatalf("ARP %s: unparsable ARP packet % x: %v", what, eth.Payload, err)
	}
	for _, f := range []struct {
		field     string
		got, want any
	}{
		{"Ethernet destination", eth.Destination.String(), ethernet.Broadcast.String()},
		{"Ethernet source", eth.Source.String(), mac.String()},
		{"ethertype", eth.EtherType, ethernet.EtherTypeARP},
		{"hardware type", p.HardwareType, uint16(1)},
		{"protocol type", p.ProtocolType, uint16(ethernet.EtherTypeIPv4)},
		{"hardware address length", p.HardwareAddrLength, uint8(6)},
		{"protocol address length", p.IPLength, uint8(4)},
		{"operation", p.Operation, op},
		{"sender hardware address", p.SenderHardwareAddr.String(), mac.String()},
		{"sender IP", p.SenderIP, ip},
		{"target hardware address", p.TargetHardwareAddr.String(), tha.String()},
		{"target IP", p.TargetIP, ip},
	} {
		if f.got != f.want {
			t.Errorf("gratuitous ARP %s for %s: %s is %v, want %v", what, ip, f.field, f.got, f.want)
		}
	}
}

// checkUnsolicitedNA checks every field of one NA frame against RFC 4861
// section 7.2.6, and its checksum.
func checkUnsolicitedNA(t *testing.T, b []byte, mac net.HardwareAddr, ll, target netip.Addr, router bool) {
	t.Helper()
	h, err := ipv6.ParseHeader(b[14:])
	if err != nil {
		t.Fatalf("NA: unparsable IPv6 header % x: %v", b[14:54], err)
	}
	src, _ := netip.AddrFromSlice(h.Src)
	dst, _ := netip.AddrFromSlice(h.Dst)
	icmp := b[54:min(len(b), 54+h.PayloadLen)]
	m, err := ndp.ParseMessage(icmp)
	if err != nil {
		t.Fatalf("NA: unparsable ICMPv6 % x: %v", icmp, err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		t.Fatalf("NA: ICMPv6 is a %T", m)
	}
	var tlla string
	if len(na.Options) == 1 {
		if o, ok := na.Options[0].(*ndp.LinkLayerAddress); ok && o.Direction == ndp.Target {
			tlla = o.Addr.String()
		}
	}
	for _, f := range []struct {
		field     string
		got, want any
	}{
		{"Ethernet destination", net.HardwareAddr(b[0:6]).String(), "33:33:00:00:00:01"},
		{"Ethernet source", net.HardwareAddr(b[6:12]).String(), mac.String()},
		{"ethertype", binary.BigEndian.Uint16(b[12:14]), uint16(unix.ETH_P_IPV6)},
		{"IP version", h.Version, 6},
		{"next header", h.NextHeader, unix.IPPROTO_ICMPV6},
		{"hop limit", h.HopLimit, 255},
		{"source (the uplink's link-local address)", src, ll},
		{"destination", dst, netip.IPv6LinkLocalAllNodes()},
		{"ICMPv6 code", icmp[1], byte(0)},
		{"checksum verifies", wire.ICMPv6Sum(src, dst, icmp), uint16(0xffff)},
		{"Router flag (the uplink's forwarding)", na.Router, router},
		{"Solicited flag", na.Solicited, false},
		{"Override flag", na.Override, true},
		{"target", na.TargetAddress, target},
		{"options: one target link-layer address", tlla, mac.String()},
	} {
		if f.got != f.want {
			t.Errorf("NA for %s: %s is %v, want %v", target, f.field, f.got, f.want)
		}
	}
}

// asNormalLANHost gives the LAN host's dev the neighbour settings every
// Linux host starts with. None of them lets a gratuitous ARP or unsolicited
// NA create an entry; they only let it update one that exists, which is all
// a move needs: arp_accept 0 still updates an existing entry from a
// gratuitous ARP, and ignores the 1 s locktime for it; drop_gratuitous_arp
// and drop_unsolicited_na 0 let the frames in at all.
func asNormalLANHost(h *host, netns, dev string) {
	h.t.Helper()
	h.sh("ip netns exec %s sysctl -qw net.ipv4.conf.all.arp_accept=0 net.ipv4.conf.%s.arp_accept=0"+
		" net.ipv4.conf.all.drop_gratuitous_arp=0 net.ipv4.conf.%s.drop_gratuitous_arp=0"+
		" net.ipv6.conf.all.drop_unsolicited_na=0 net.ipv6.conf.%s.drop_unsolicited_na=0",
		netns, dev, dev, dev)
}

// neighMAC is the link-layer address in netns's cache for ip on dev, "" if
// it has no entry or the entry has none.
func (h *host) neighMAC(netns, dev, ip string) (mac, line string) {
	h.t.Helper()
	line = strings.TrimSpace(h.sh("ip -n %s neigh show to %s dev %s", netns, ip, dev))
	f := strings.Fields(line)
	for i := range f {
		if f[i] == "lladdr" && i+1 < len(f) {
			return f[i+1], line
		}
	}
	return "", line
}

// waitNeighMAC polls the cache until it names want. The frames are on the
// wire when ADD returns and the LAN host's kernel handles them in
// microseconds, but a loaded machine may run its softirq late: the bound is
// generous, and the configs of these tests send one round only, so no later
// round can be what fills the cache.
func (h *host) waitNeighMAC(t *testing.T, netns, dev, ip, want, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, line := h.neighMAC(netns, dev, ip)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the LAN host's cache has %q for %s, want lladdr %s", when, line, ip, want)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStaleLANEntriesTakeTheNodesMACFromOneRound(t *testing.T) {
	ips := []string{"192.0.2.61", "2001:db8:1::61"}
	const bogus = "02:00:00:00:00:99"
	h := newHost(t)
	h.waitLAN()
	asNormalLANHost(h, h.lan, "lan0")
	for _, ip := range ips {
		h.sh("ip -n %s neigh replace %s lladdr %s dev lan0 nud stale", h.lan, ip, bogus)
		if got, line := h.neighMAC(h.lan, "lan0", ip); got != bogus {
			t.Fatalf("setting up a stale entry for %s: cache shows %q", ip, line)
		}
	}
	nodeMAC := h.linkMAC(h.name, "uplink0")
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "announce": map[string]any{"count": 1}})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	for _, ip := range ips {
		h.waitNeighMAC(t, h.lan, "lan0", ip, nodeMAC, "after one round")
	}
}

func TestLANHostPingsOnLinkExternalIPs(t *testing.T) {
	ips := []string{"192.0.2.62", "2001:db8:1::62"}
	h := newHost(t)
	h.waitLAN()
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...)})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	for _, ip := range ips {
		if out, err := h.try("ip netns exec %s ping -c1 -W2 %s", h.lan, ip); err != nil {
			t.Errorf("the LAN host cannot ping %s on the node: %v\n%s", ip, err, out)
		}
	}
}

// Addresses of the two-node LAN: the LAN host is .2 on its bridge.
var bridgedNodes = [2]struct{ mac, v4, v6 string }{
	{"02:00:00:00:01:01", "192.0.2.1", "2001:db8:1::1"},
	{"02:00:00:00:02:01", "192.0.2.3", "2001:db8:1::3"},
}

// newBridgedNodes makes a LAN namespace whose bridge br0 joins the uplinks
// of two nodes, each uplink0 in 192.0.2.0/24 and 2001:db8:1::/64 with its
// own MAC, set up as newHost sets up one. It returns the two nodes, which
// share the LAN namespace; the LAN host's interface is br0.
func newBridgedNodes(t *testing.T) [2]*host {
	t.Helper()
	id := randomID(4)
	var nodes [2]*host
	lan := "eipbl-" + id
	for i := range nodes {
		nodes[i] = &host{t: t, name: fmt.Sprintf("eipb%d-%s", i+1, id), lan: lan, dataDir: t.TempDir()}
		t.Cleanup(nodes[i].destroy)
	}
	h := nodes[0]
	for _, n := range []string{lan, nodes[0].name, nodes[1].name} {
		h.sh("ip netns add %s", n)
		h.sh("ip -n %s link set lo up", n)
		h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", n)
	}
	// No multicast snooping: the bridge floods neighbour discovery as a
	// plain switch does, whatever MLD reports it has or has not seen.
	h.sh("ip -n %s link add br0 type bridge forward_delay 0 mcast_snooping 0", lan)
	for i, n := range nodes {
		port := fmt.Sprintf("node%d", i+1)
		h.sh("ip -n %s link add uplink0 address %s type veth peer name %s netns %s", n.name, bridgedNodes[i].mac, port, lan)
		h.sh("ip -n %s link set %s master br0 up", lan, port)
		h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.uplink0.accept_dad=0 net.ipv6.conf.uplink0.forwarding=1", n.name)
		h.sh("ip -n %s addr add %s/24 dev uplink0", n.name, bridgedNodes[i].v4)
		h.sh("ip -n %s addr add %s/64 dev uplink0 nodad", n.name, bridgedNodes[i].v6)
		h.sh("ip -n %s link set uplink0 up", n.name)
	}
	h.sh("ip -n %s addr add %s/24 dev br0", lan, lanV4)
	h.sh("ip -n %s addr add %s/64 dev br0 nodad", lan, lanV6)
	h.sh("ip -n %s link set br0 up", lan)
	asNormalLANHost(h, lan, "br0")
	h.waitIPv6Ready(lan, "br0")
	for _, n := range nodes {
		n.waitIPv6Ready(n.name, "uplink0")
	}
	return nodes
}

func TestMovedIPReachesTheLANCacheInOneRound(t *testing.T) {
	ips := []string{"192.0.2.63", "2001:db8:1::63"}
	nodes := newBridgedNodes(t)
	lan := nodes[0].lan
	confs := [2]map[string]any{}
	for i, n := range nodes {
		confs[i] = n.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "announce": map[string]any{"count": 1}})
	}

	nodes[0].run(attach("ADD", "c1", confs[0])).mustOK(t, "ADD on node1")
	for _, ip := range ips {
		if out, err := nodes[0].try("ip netns exec %s ping -c1 -W2 %s", lan, ip); err != nil {
			t.Fatalf("the LAN host cannot ping %s on node1: %v\n%s", ip, err, out)
		}
		nodes[0].waitNeighMAC(t, lan, "br0", ip, bridgedNodes[0].mac, "after the LAN pinged node1")
	}
	nodes[0].run(attach("DEL", "c1", confs[0])).mustOK(t, "DEL on node1")

	nodes[1].run(attach("ADD", "c2", confs[1])).mustOK(t, "ADD on node2")
	for _, ip := range ips {
		nodes[1].waitNeighMAC(t, lan, "br0", ip, bridgedNodes[1].mac, "right after ADD on node2")
	}
}

// netnsInode is the inode that identifies namespace name.
func netnsInode(t *testing.T, name string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join("/var/run/netns", name), &st); err != nil {
		t.Fatalf("finding namespace %s: %v", name, err)
	}
	return st.Ino
}

// pluginProcs lists the live processes running the plugin under test in
// namespace netns: after ADD, only detached announcers.
func pluginProcs(t *testing.T, netns string) []string {
	t.Helper()
	want := fmt.Sprintf("net:[%d]", netnsInode(t, netns))
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range pids {
		// The faultinject build's children count too: a DEL's detached
		// conntrack clean-up writes to the state directory after the
		// plugin exits, which a test must wait for before its TempDir goes.
		exe, err := os.Readlink(p + "/exe")
		if err != nil || (exe != pluginBin && (crashBin == "" || exe != crashBin)) {
			continue
		}
		if isSink(p) {
			continue // holds sockets, writes nothing (package sink)
		}
		if n, err := os.Readlink(p + "/ns/net"); err == nil && n == want {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

// isSink says whether the process at /proc path p is a dataDir's sink.
func isSink(p string) bool {
	env, _ := os.ReadFile(p + "/environ")
	return bytes.Contains(env, []byte("\x00"+sink.EnvDir+"=")) || bytes.HasPrefix(env, []byte(sink.EnvDir+"="))
}

func TestLaterRoundsLeaveADDAndArriveIntervalApart(t *testing.T) {
	const rounds, interval = 3, 300 * time.Millisecond
	ip4, ip6 := netip.MustParseAddr("192.0.2.64"), netip.MustParseAddr("2001:db8:1::64")
	h := newHost(t)
	h.waitLAN()
	frames := captureOn(t, h.lan, "lan0")
	conf := h.netConf("1.0.0", map[string]any{
		"runtimeConfig": runtimeIPs(ip4.String(), ip6.String()),
		"announce":      map[string]any{"count": rounds, "interval": interval.String()},
	})
	r, took := h.timedRun(attach("ADD", "c1", conf))
	r.mustOK(t, "ADD")
	if took >= interval {
		t.Errorf("ADD took %s, not under one interval (%s): it waits for later rounds", took, interval)
	}
	if procs := pluginProcs(t, h.name); len(procs) != 1 {
		t.Errorf("right after ADD, %d announcers (%v) run in the node, want 1 for the one uplink", len(procs), procs)
	}

	got := collectWire(frames, time.Duration(rounds)*interval+3*time.Second,
		wireWant{arpAbout(ip4, arp.OperationRequest), rounds},
		wireWant{naFor(ip6), rounds})
	for i, what := range []string{"gratuitous ARP request for " + ip4.String(), "NA for " + ip6.String()} {
		if len(got[i]) != rounds {
			t.Fatalf("the LAN received %d of %s, want %d: one per round", len(got[i]), what, rounds)
		}
		checkRoundSpacing(t, what, got[i], interval)
	}

	last := got[0][rounds-1].At
	if t6 := got[1][rounds-1].At; t6.After(last) {
		last = t6
	}
	deadline := last.Add(time.Second)
	for procs := pluginProcs(t, h.name); len(procs) > 0; procs = pluginProcs(t, h.name) {
		if time.Now().After(deadline) {
			t.Fatalf("a second after the last round, announcers %v still run in the node", procs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRoundSpacing wants arrivals interval apart. The first gap also holds
// the detached child's start-up; arrival is stamped in user space, so a late
// read of one round can shorten the next gap a little.
func checkRoundSpacing(t *testing.T, what string, at []wireFrame, interval time.Duration) {
	t.Helper()
	const early = 100 * time.Millisecond
	for i := 1; i < len(at); i++ {
		late := 300 * time.Millisecond
		if i == 1 {
			late = time.Second
		}
		if gap := at[i].At.Sub(at[i-1].At); gap < interval-early || gap > interval+late {
			t.Errorf("%s: round %d came %s after round %d, want %s (-%s, +%s)", what, i+1, gap, i, interval, early, late)
		}
	}
}
