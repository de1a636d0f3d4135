package announce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/test/wire"
)

var (
	wireIP4 = []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")}
	wireIP6 = []netip.Addr{netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::8")}
)

func isARP(b []byte) bool {
	return len(b) >= 14 && binary.BigEndian.Uint16(b[12:14]) == unix.ETH_P_ARP
}

// isNA matches an Ethernet frame carrying IPv6, ICMPv6, type 136.
func isNA(b []byte) bool {
	return len(b) >= 14+40+1 && binary.BigEndian.Uint16(b[12:14]) == unix.ETH_P_IPV6 &&
		b[14+6] == unix.IPPROTO_ICMPV6 && b[14+40] == 136
}

func TestRoundPutsGratuitousARPAndUnsolicitedNAOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		router bool
	}{{"host", false}, {"router", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLink(t)
			l.uplink.Router = tc.router
			frames := l.capture(t)
			l.inNode(t, func() error {
				s := NewSender(l.uplink)
				defer s.Close()
				return s.Round(append(append([]netip.Addr(nil), wireIP4...), wireIP6...))
			})
			// ARP and ICMPv6 go out on separate sockets, so the two kinds
			// are collected in two passes over one stream.
			arps := collect(frames, isARP, 2*len(wireIP4), 2*time.Second)
			checkARPs(t, arps, l.uplink.MAC, wireIP4)
			nas := collect(frames, isNA, len(wireIP6), 2*time.Second)
			checkNAs(t, nas, l, wireIP6)
		})
	}
}

// checkARPs wants, for each ip, one broadcast request and one broadcast reply
// laid out as RFC 5227 section 2.3 says.
func checkARPs(t *testing.T, got []frame, mac net.HardwareAddr, ips []netip.Addr) {
	t.Helper()
	if len(got) != 2*len(ips) {
		t.Fatalf("received %d ARP frames, want 2 for each of %v", len(got), ips)
	}
	zero := make(net.HardwareAddr, 6)
	seen := map[netip.Addr]map[arp.Operation]bool{}
	for _, f := range got {
		var eth ethernet.Frame
		var p arp.Packet
		if err := eth.UnmarshalBinary(f.Data); err != nil {
			t.Fatalf("received an unparsable Ethernet frame % x: %v", f.Data, err)
		}
		if err := p.UnmarshalBinary(eth.Payload); err != nil {
			t.Fatalf("received an unparsable ARP packet % x: %v", eth.Payload, err)
		}
		if !bytes.Equal(eth.Destination, ethernet.Broadcast) || !bytes.Equal(eth.Source, mac) {
			t.Errorf("ARP frame went %s -> %s, want %s -> broadcast", eth.Source, eth.Destination, mac)
		}
		wantTHA := map[arp.Operation]net.HardwareAddr{arp.OperationRequest: zero, arp.OperationReply: mac}[p.Operation]
		if wantTHA == nil || !bytes.Equal(p.SenderHardwareAddr, mac) || p.SenderIP != p.TargetIP ||
			!bytes.Equal(p.TargetHardwareAddr, wantTHA) {
			t.Errorf("ARP op %d sha %s spa %s tha %s tpa %s is not a gratuitous request or reply from %s",
				p.Operation, p.SenderHardwareAddr, p.SenderIP, p.TargetHardwareAddr, p.TargetIP, mac)
		}
		if seen[p.SenderIP] == nil {
			seen[p.SenderIP] = map[arp.Operation]bool{}
		}
		seen[p.SenderIP][p.Operation] = true
	}
	for _, ip := range ips {
		if !seen[ip][arp.OperationRequest] || !seen[ip][arp.OperationReply] {
			t.Errorf("for %s received operations %v, want both request and reply", ip, seen[ip])
		}
	}
}

// checkNAs wants one NA per ip, from the uplink's link-local address to all
// nodes, unrouted (hop limit 255), with a checksum the kernel filled in.
func checkNAs(t *testing.T, got []frame, l *link, ips []netip.Addr) {
	t.Helper()
	if len(got) != len(ips) {
		t.Fatalf("received %d neighbour advertisements, want one for each of %v", len(got), ips)
	}
	targets := map[netip.Addr]bool{}
	for _, f := range got {
		eth, hdr := f.Data[:14], f.Data[14:54]
		h, err := ipv6.ParseHeader(hdr)
		if err != nil {
			t.Fatalf("received an unparsable IPv6 header % x: %v", hdr, err)
		}
		if want := (net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}); !bytes.Equal(eth[:6], want) || !bytes.Equal(eth[6:12], l.uplink.MAC) {
			t.Errorf("NA frame went %s -> %s, want %s -> %s", net.HardwareAddr(eth[6:12]), net.HardwareAddr(eth[:6]), l.uplink.MAC, want)
		}
		src, _ := netip.AddrFromSlice(h.Src)
		dst, _ := netip.AddrFromSlice(h.Dst)
		if src != l.linkLocal || dst != netip.IPv6LinkLocalAllNodes() || h.HopLimit != 255 {
			t.Errorf("NA went %s -> %s hop limit %d, want %s -> ff02::1 hop limit 255", src, dst, h.HopLimit, l.linkLocal)
		}
		icmp := f.Data[54 : 54+h.PayloadLen]
		if sum := wire.ICMPv6Sum(src, dst, icmp); sum != 0xffff {
			t.Errorf("NA checksum % x does not verify (sum %#04x): the kernel did not fill it", icmp[2:4], sum)
		}
		targets[checkNA(t, icmp, l.uplink)] = true
	}
	for _, ip := range ips {
		if !targets[ip] {
			t.Errorf("no NA received for %s; received targets %v", ip, targets)
		}
	}
}

// checkNA checks the flags and option of one NA and returns its target.
func checkNA(t *testing.T, icmp []byte, up Uplink) netip.Addr {
	t.Helper()
	m, err := ndp.ParseMessage(icmp)
	if err != nil {
		t.Fatalf("received an unparsable NA % x: %v", icmp, err)
	}
	na := m.(*ndp.NeighborAdvertisement)
	if na.Router != up.Router || na.Solicited || !na.Override {
		t.Errorf("NA for %s has R=%v S=%v O=%v, want R=%v S=false O=true",
			na.TargetAddress, na.Router, na.Solicited, na.Override, up.Router)
	}
	if len(na.Options) != 1 {
		t.Fatalf("NA for %s has options %v, want only the target link-layer address", na.TargetAddress, na.Options)
	}
	lla, ok := na.Options[0].(*ndp.LinkLayerAddress)
	if !ok || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, up.MAC) {
		t.Errorf("NA for %s has option %+v, want target link-layer address %s", na.TargetAddress, na.Options[0], up.MAC)
	}
	return na.TargetAddress
}

func TestRoundReportsWhyItCouldNotSend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ips   []netip.Addr
		setup [][]string // ip commands run in the node namespace
		want  error
	}{
		{"IPv4 on a down uplink", wireIP4, [][]string{{"link", "set", nodeIf, "down"}}, unix.ENETDOWN},
		// Down takes the link-local address away too.
		{"IPv6 on a down uplink", wireIP6, [][]string{{"link", "set", nodeIf, "down"}}, unix.EADDRNOTAVAIL},
		{"IPv6 without a link-local address", wireIP6, [][]string{
			{"link", "set", nodeIf, "addrgenmode", "none"},
			{"-6", "addr", "flush", "dev", nodeIf},
		}, unix.EADDRNOTAVAIL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLink(t)
			for _, args := range tc.setup {
				ip(t, append([]string{"-n", l.nodeName}, args...)...)
			}
			var err error
			l.inNode(t, func() error {
				s := NewSender(l.uplink)
				defer s.Close()
				err = s.Round(tc.ips)
				return nil
			})
			if !errors.Is(err, tc.want) {
				t.Errorf("round returned %v, want %v", err, tc.want)
			}
		})
	}
}
