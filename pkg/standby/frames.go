package standby

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

// kind is what a frame says about an IP.
type kind int

const (
	// none: nothing the watch acts on.
	none kind = iota
	// claim: a host answers for the IP or announces it (an ARP whose
	// sender IP is the IP, a neighbour advertisement for it).
	claim
	// goodbye: a host probes for the IP as RFC 5227 and RFC 4862 do
	// before taking an address (sender 0.0.0.0, source ::); from the
	// active holder's MAC, it has just given the IP up (announce.Goodbye).
	goodbye
	// ask: a host resolves the IP from an address of its own: a standby
	// checking on the active.
	ask
)

// heard is one frame read: what it says, of which IP, from which MAC;
// from is an ask's own source address, which that host uses.
type heard struct {
	kind kind
	ip   netip.Addr
	mac  net.HardwareAddr
	from netip.Addr
}

// read decodes an Ethernet frame; kind none for anything else.
func read(f []byte) heard {
	var e ethernet.Frame
	if e.UnmarshalBinary(f) != nil {
		return heard{}
	}
	switch e.EtherType {
	case ethernet.EtherTypeARP:
		return readARP(e.Payload)
	case ethernet.EtherTypeIPv6:
		return readND(e.Source, e.Payload)
	}
	return heard{}
}

func readARP(b []byte) heard {
	var p arp.Packet
	if p.UnmarshalBinary(b) != nil || !p.TargetIP.Is4() {
		return heard{}
	}
	h := heard{mac: p.SenderHardwareAddr}
	switch {
	case p.SenderIP.Is4() && !p.SenderIP.IsUnspecified() && (p.Operation == arp.OperationReply || p.SenderIP == p.TargetIP):
		h.kind, h.ip = claim, p.SenderIP
	case p.Operation != arp.OperationRequest:
	case p.SenderIP.IsUnspecified():
		h.kind, h.ip = goodbye, p.TargetIP
	default:
		h.kind, h.ip, h.from = ask, p.TargetIP, p.SenderIP
	}
	return h
}

// ipv6Len is the fixed IPv6 header; neighbour discovery uses no
// extension headers.
const ipv6Len = 40

// readND reads a neighbour advertisement (a claim) or solicitation (a
// goodbye from ::, else an ask); routed ones (hop limit not 255) are
// ignored, as RFC 4861 section 7.1 requires.
func readND(src net.HardwareAddr, p []byte) heard {
	if len(p) < ipv6Len || p[0]>>4 != 6 || p[6] != unix.IPPROTO_ICMPV6 || p[7] != 255 {
		return heard{}
	}
	end := ipv6Len + int(binary.BigEndian.Uint16(p[4:6]))
	if end > len(p) {
		return heard{}
	}
	m, err := ndp.ParseMessage(p[ipv6Len:end])
	if err != nil {
		return heard{}
	}
	h := heard{mac: src}
	switch m := m.(type) {
	case *ndp.NeighborAdvertisement:
		h.kind, h.ip = claim, m.TargetAddress
		for _, o := range m.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
				h.mac = lla.Addr
			}
		}
	case *ndp.NeighborSolicitation:
		h.kind, h.ip, h.from = ask, m.TargetAddress, netip.AddrFrom16([16]byte(p[8:24]))
		if h.from.IsUnspecified() {
			h.kind, h.from = goodbye, netip.Addr{}
		}
	}
	return h
}

// From is what a check asks from on one uplink: its MAC, and its own
// IPv4 address and IPv6 link-local address. A check is not sent without
// the address of its family: one from 0.0.0.0 a node holding the IP as a
// route does not answer (arp_process answers those for local addresses
// only), and one with no IPv6 source is no solicitation at all, so each
// would count a miss of an active that is alive.
type From struct {
	MAC       net.HardwareAddr
	V4, Local netip.Addr
}

// check is the frame that asks whether ip still answers: to mac, the
// active holder's, or broadcast (the solicited-node group) when nil.
func check(f From, ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	if ip.Is4() {
		if !f.V4.IsValid() {
			return nil, errors.New("the uplink has no IPv4 address to check from")
		}
		return arpCheck(f, ip, mac)
	}
	if !f.Local.IsValid() {
		return nil, errors.New("the uplink has no IPv6 link-local address to check from")
	}
	return nsCheck(f, ip, mac)
}

func arpCheck(f From, ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	p, err := arp.NewPacket(arp.OperationRequest, f.MAC, f.V4, make(net.HardwareAddr, 6), ip)
	if err != nil {
		return nil, err
	}
	payload, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	dst := ethernet.Broadcast
	if mac != nil {
		dst = mac
	}
	e := ethernet.Frame{Destination: dst, Source: f.MAC, EtherType: ethernet.EtherTypeARP, Payload: payload}
	return e.MarshalBinary()
}

// nsCheck is a neighbour solicitation from the uplink's link-local
// address to ip's solicited-node group, which the active holder's proxy
// entry has it listen to in either hold mode (a unicast one to ip itself
// would be forwarded, not answered, by a node holding ip as a route);
// unicast at the Ethernet layer when mac is known.
func nsCheck(f From, ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip, Options: []ndp.Option{
		&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: f.MAC},
	}}
	icmp, err := ndp.MarshalMessageChecksum(ns, f.Local, group)
	if err != nil {
		return nil, err
	}
	g := group.As16()
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	if mac != nil {
		dst = mac
	}
	b := make([]byte, 0, 14+ipv6Len+len(icmp))
	b = append(append(b, dst...), f.MAC...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, 255)
	b = append(b, f.Local.AsSlice()...)
	b = append(b, g[:]...)
	return append(b, icmp...), nil
}

// lower says whether a is below b: of two nodes both holding an IP
// actively, the one whose uplink MAC is lower yields, so that both decide
// alike without a word.
func lower(a, b net.HardwareAddr) bool { return bytes.Compare(a, b) < 0 }

// sameMAC says whether a is b, a MAC known (b not nil).
func sameMAC(a, b net.HardwareAddr) bool { return b != nil && bytes.Equal(a, b) }
