package nat

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ForgetTarget deletes the conntrack entries of flows to ip that were
// DNATed to target (original destination ip, reply source target), so that
// a client whose flow went to a leaving holder starts a new flow, which the
// remaining holders get, instead of sending into the void.
func ForgetTarget(ip, target netip.Addr) (uint, error) {
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigDstIP, ip.AsSlice()); err != nil {
		return 0, err
	}
	if err := f.AddIP(netlink.ConntrackReplySrcIP, target.AsSlice()); err != nil {
		return 0, err
	}
	return forget(ip, f)
}

// ForgetIP deletes every conntrack entry of ip: flows to it (original
// destination) and flows SNATed from it (reply destination), for an IP that
// leaves the node.
func ForgetIP(ip netip.Addr) (uint, error) {
	to, from := &netlink.ConntrackFilter{}, &netlink.ConntrackFilter{}
	if err := to.AddIP(netlink.ConntrackOrigDstIP, ip.AsSlice()); err != nil {
		return 0, err
	}
	if err := from.AddIP(netlink.ConntrackReplyDstIP, ip.AsSlice()); err != nil {
		return 0, err
	}
	return forget(ip, to, from)
}

func forget(ip netip.Addr, filters ...netlink.CustomConntrackFilter) (uint, error) {
	fam := netlink.InetFamily(unix.AF_INET)
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filters...)
	if err != nil {
		return n, fmt.Errorf("deleting conntrack entries of %s: %w", ip, err)
	}
	return n, nil
}
