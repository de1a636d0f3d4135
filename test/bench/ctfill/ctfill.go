// Package ctfill fills the current network namespace's conntrack table
// with UDP entries between addresses no bench scenario uses, as a working
// node's table holds entries of flows that are none of ours.
package ctfill

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Fill creates count entries of each family, alive for an hour: longer
// than any run.
func Fill(count int) error {
	for i := range count {
		v4, v6 := netip.AddrFrom4([4]byte{203, 0, 113, byte(i % 250)}), netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0xfe, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		for _, pair := range [][2]netip.Addr{{netip.MustParseAddr("198.51.100.7"), v4}, {netip.MustParseAddr("2001:db8:ff::7"), v6}} {
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, family(pair[0]), udpFlow(pair[0], pair[1], uint16(1024+i))); err != nil {
				return err
			}
		}
	}
	return nil
}

func family(a netip.Addr) netlink.InetFamily {
	if a.Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func udpFlow(src, dst netip.Addr, sport uint16) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{
		FamilyType: uint8(family(src)),
		Forward:    netlink.IPTuple{SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: sport, DstPort: 53},
		Reverse:    netlink.IPTuple{SrcIP: dst.AsSlice(), DstIP: src.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: sport},
		TimeOut:    3600,
	}
}
