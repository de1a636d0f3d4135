package standbyrows

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

var (
	active, _  = net.ParseMAC(macs[0])
	standby, _ = net.ParseMAC(macs[1])
)

// arpFrame is an ARP packet of op from sender (senderIP) for target.
func arpFrame(t *testing.T, op arp.Operation, dst net.HardwareAddr, senderIP, target netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, standby, senderIP, dst, target)
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f, err := (&ethernet.Frame{Destination: dst, Source: standby, EtherType: ethernet.EtherTypeARP, Payload: body}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ndFrame is an IPv6 frame carrying m (its checksum is not checked).
func ndFrame(t *testing.T, m ndp.Message) []byte {
	t.Helper()
	body, err := ndp.MarshalMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	ip6 := make([]byte, 40)
	ip6[0], ip6[6], ip6[7] = 0x60, unix.IPPROTO_ICMPV6, 255
	ip6[4], ip6[5] = byte(len(body)>>8), byte(len(body))
	f, err := (&ethernet.Frame{Destination: active, Source: standby, EtherType: ethernet.EtherTypeIPv6, Payload: append(ip6, body...)}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A frame is about the IP a check asks for or an answer gives: an ARP
// request's target, an ARP reply's sender, a neighbour solicitation's or
// advertisement's target; any other frame is about none.
func TestAFrameIsAboutTheIPItAsksOrAnswersFor(t *testing.T) {
	ip4, ip6, node := held[false], held[true], netip.MustParseAddr(nodeAddrs[1][0])
	for _, c := range []struct {
		what  string
		frame []byte
		want  netip.Addr
	}{
		{"an ARP check", arpFrame(t, arp.OperationRequest, active, node, ip4), ip4},
		{"an ARP answer", arpFrame(t, arp.OperationReply, active, ip4, node), ip4},
		{"a neighbour solicitation", ndFrame(t, &ndp.NeighborSolicitation{TargetAddress: ip6}), ip6},
		{"a neighbour advertisement", ndFrame(t, &ndp.NeighborAdvertisement{Solicited: true, TargetAddress: ip6}), ip6},
		{"a router solicitation", ndFrame(t, &ndp.RouterSolicitation{}), netip.Addr{}},
		{"a runt", []byte{1, 2, 3}, netip.Addr{}},
	} {
		got, ok := aboutIP(c.frame)
		if ok != c.want.IsValid() || (ok && got != c.want) {
			t.Errorf("%s: about %v (%v), want %v", c.what, got, ok, c.want)
		}
	}
}

// Each frame a node sends is counted once, by its sender, where it
// enters the LAN; the copy the bridge sends out of another port is not.
func TestAFrameIsCountedOnceBySenderAndBroadcastApart(t *testing.T) {
	ip4 := held[false]
	counts := tallies{ip4: &tally{}}
	check := arpFrame(t, arp.OperationRequest, active, netip.MustParseAddr(nodeAddrs[1][0]), ip4)
	counts.count(check, 1, unix.PACKET_OTHERHOST) // the standby's check, in at node2's port
	counts.count(check, 0, unix.PACKET_OUTGOING)  // the same, out of node1's port
	counts.count(arpFrame(t, arp.OperationReply, standby, ip4, netip.MustParseAddr(nodeAddrs[1][0])), 0, unix.PACKET_OTHERHOST)
	counts.count(arpFrame(t, arp.OperationRequest, ethernet.Broadcast, netip.MustParseAddr(nodeAddrs[1][0]), ip4), 1, unix.PACKET_BROADCAST)
	counts.count(check, -1, unix.PACKET_BROADCAST) // the bridge's own interface
	counts.count(arpFrame(t, arp.OperationRequest, active, netip.MustParseAddr(nodeAddrs[1][0]), free[false]), 1, unix.PACKET_OTHERHOST)
	if got := *counts[ip4]; got != (tally{from: [2]int{1, 2}, broadcast: 1}) {
		t.Errorf("counted %+v, want 1 from the active, 2 from the standby, 1 broadcast", got)
	}
}

// The check traffic's table states, per IP, frames per second that parse
// as numbers, and its goal.
func TestTheCheckTrafficTableParses(t *testing.T) {
	ips := []netip.Addr{held[false], held[true]}
	table := trafficTable(ips, tallies{ips[0]: {from: [2]int{25, 25}}, ips[1]: {from: [2]int{24, 26}, broadcast: 1}}, 5*time.Second)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2+len(ips) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), 2+len(ips), table)
	}
	for i, line := range lines[2:] {
		c := strings.Split(strings.Trim(line, "|"), "|")
		if len(c) != 6 || !strings.Contains(c[0], ips[i].String()) || !strings.Contains(c[5], "no ARP storm") {
			t.Fatalf("line %q: want the IP, four figures and the goal", line)
		}
		for _, f := range c[1:5] {
			if _, err := strconv.ParseFloat(strings.TrimSpace(f), 64); err != nil {
				t.Errorf("line %q: %q is no number", line, f)
			}
		}
	}
	if !strings.Contains(lines[2], "| 10.0 | 5.0 | 5.0 | 0.0 |") || !strings.Contains(lines[3], "| 10.0 | 5.2 | 4.8 | 0.2 |") {
		t.Errorf("frames per second:\n%s", table)
	}
}

// Every goal names rows the standby rows make, each once, and every
// takeover row has its goal.
func TestTheGoalsNameTheRows(t *testing.T) {
	rows := map[string]bool{}
	for _, fam := range []string{"IPv4", "IPv6"} {
		rows[RowStandby(fam)], rows[RowToday(fam)] = true, true
		for _, f := range Faults {
			rows[f.Row(fam)] = true
		}
	}
	if len(rows) != 4+2*len(Faults) {
		t.Errorf("%d distinct rows, want %d", len(rows), 4+2*len(Faults))
	}
	seen := map[string]bool{}
	for _, g := range Goals(func(fam string) string { return "empty " + fam }) {
		if !rows[g.Ours] || (!rows[g.Ref] && !strings.HasPrefix(g.Ref, "empty ")) || seen[g.Ours+g.Ref] {
			t.Errorf("goal %+v names a row the rows do not make, or twice", g)
		}
		seen[g.Ours+g.Ref] = true
		if g.Max && (g.Ours != g.Ref || g.Goal == "") {
			t.Errorf("takeover goal %+v: want a row's own largest time against a goal", g)
		}
	}
	if len(seen) != 4+2*len(Faults) {
		t.Errorf("%d goals, want %d", len(seen), 4+2*len(Faults))
	}
}
