package announce

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// ethernetAddrLen is the only hardware address length we announce for: the
// libraries accept longer (InfiniBand) addresses, which an Ethernet frame
// cannot carry.
const ethernetAddrLen = 6

// GratuitousARP returns the two Ethernet frames of one IPv4 round per RFC 5227
// section 2.3:
//
//   - [0] an ARP request: Ethernet destination ff:ff:ff:ff:ff:ff, source mac,
//     ethertype 0x0806; ARP operation 1, sender hardware address mac, sender
//     IP ip, target hardware address 00:00:00:00:00:00, target IP ip.
//   - [1] its reply twin: the same with ARP operation 2 and target hardware
//     address mac (still broadcast), for neighbours that update their caches
//     only from replies. Linux takes either as gratuitous.
//
// Frames are padded to the 60-byte Ethernet minimum.
func GratuitousARP(mac net.HardwareAddr, ip netip.Addr) ([2][]byte, error) {
	var frames [2][]byte
	if len(mac) != ethernetAddrLen {
		return frames, fmt.Errorf("gratuitous ARP for %s: hardware address %q is not a 6-byte Ethernet address", ip, mac)
	}
	if !ip.Is4() {
		return frames, fmt.Errorf("gratuitous ARP for %s: not an IPv4 address", ip)
	}
	zero := make(net.HardwareAddr, ethernetAddrLen)
	for i, op := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, zero}, {arp.OperationReply, mac}} {
		f, err := arpFrame(op.op, mac, ip, op.tha)
		if err != nil {
			return frames, fmt.Errorf("gratuitous ARP for %s: %w", ip, err)
		}
		frames[i] = f
	}
	return frames, nil
}

// arpFrame wraps one ARP packet whose sender and target IP are both ip in a
// broadcast Ethernet frame.
func arpFrame(op arp.Operation, mac net.HardwareAddr, ip netip.Addr, tha net.HardwareAddr) ([]byte, error) {
	p, err := arp.NewPacket(op, mac, ip, tha, ip)
	if err != nil {
		return nil, err
	}
	payload, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	f := ethernet.Frame{
		Destination: ethernet.Broadcast,
		Source:      mac,
		EtherType:   ethernet.EtherTypeARP,
		Payload:     payload,
	}
	return f.MarshalBinary()
}

// UnsolicitedNA returns the ICMPv6 message (type 136, without an IPv6 header)
// of an unsolicited neighbour advertisement per RFC 4861 section 7.2.6:
// Router = router, Solicited = false, Override = true, target = ip, and a
// target link-layer address option carrying mac. The checksum is left zero:
// the kernel fills it in on an ICMPv6 raw socket, where it knows the source
// address the pseudo-header needs.
func UnsolicitedNA(mac net.HardwareAddr, ip netip.Addr, router bool) ([]byte, error) {
	if len(mac) != ethernetAddrLen {
		return nil, fmt.Errorf("neighbour advertisement for %s: hardware address %q is not a 6-byte Ethernet address", ip, mac)
	}
	if !ip.Is6() || ip.Is4In6() || ip.Zone() != "" {
		return nil, fmt.Errorf("neighbour advertisement for %s: not an unzoned IPv6 address", ip)
	}
	b, err := ndp.MarshalMessage(&ndp.NeighborAdvertisement{
		Router:        router,
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	})
	if err != nil {
		return nil, fmt.Errorf("neighbour advertisement for %s: %w", ip, err)
	}
	return b, nil
}
