package main

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// conntrackUnits add the default mode's ADD/DEL pair of each family on a
// node whose conntrack table holds -conntrack unrelated entries of each
// family, as a working node's does. A steered DEL forgets the leaving IP's
// flows, and the kernel's dump that finds them walks its whole conntrack
// hash; on the empty nodes the plugin sees that there is no entry at all
// and skips the walk, so only these rows show what it costs.
func (b *bench) conntrackUnits(res *results) (*node, error) {
	if b.opts.conntrack == 0 || b.defaultTraffic() == trafficNone {
		return nil, nil
	}
	n, err := b.newNode("ct")
	if err != nil {
		return nil, err
	}
	if err := n.ns.Do(func(ns.NetNS) error { return addFlows(b.opts.conntrack) }); err != nil {
		return nil, fmt.Errorf("filling %s's conntrack table: %w", n.name, err)
	}
	logf("%s: %d conntrack entries of each family", n.name, b.opts.conntrack)
	for i, v6 := range []bool{false, true} {
		name := fmt.Sprintf("external-ip ADD %s, traffic %s, %d conntrack entries", famName(v6), b.defaultTraffic(), b.opts.conntrack)
		b.eipPair(res, name, "held", n, "external-ip", 200+i, v6, b.defaultTraffic())
	}
	return n, nil
}

// addFlows creates count UDP entries of each family between addresses no
// scenario uses, alive for an hour: longer than any run.
func addFlows(count int) error {
	for i := range count {
		for _, pair := range [][2]netip.Addr{
			{netip.MustParseAddr("198.51.100.7"), addrPlus("203.0.113.0", i%250)},
			{netip.MustParseAddr("2001:db8:ff::7"), addrPlus("2001:db8:fe::", i)},
		} {
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, flowFamily(pair[0]), udpFlow(pair[0], pair[1], uint16(1024+i))); err != nil {
				return err
			}
		}
	}
	return nil
}

func flowFamily(a netip.Addr) netlink.InetFamily {
	if a.Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func udpFlow(src, dst netip.Addr, sport uint16) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{
		FamilyType: uint8(flowFamily(src)),
		Forward:    netlink.IPTuple{SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: sport, DstPort: 53},
		Reverse:    netlink.IPTuple{SrcIP: dst.AsSlice(), DstIP: src.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: sport},
		TimeOut:    3600,
	}
}
