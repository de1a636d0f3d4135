package announce

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ifAddr is one IPv4 address of an interface, as RTM_NEWADDR gives it.
type ifAddr struct {
	prefix    netip.Prefix
	index     int
	secondary bool
}

// uplinkIPv4 is the uplink's own IPv4 address a node would ask for ip
// from: the primary address whose subnet holds ip, else its first primary
// address, else any; the zero Addr when it has none. One request, which
// with strict checking the kernel answers with the uplink's addresses
// alone: a node holding thousands of addresses on its holder pays nothing
// for them (without strict checking they are filtered here).
func uplinkIPv4(up Uplink, ip netip.Addr) (netip.Addr, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading the IPv4 addresses of %s: %w", up.Name, err)
	}
	defer c.Close()
	_ = c.SetOption(netlink.GetStrictCheck, true)
	hdr := make([]byte, unix.SizeofIfAddrmsg)
	hdr[0] = unix.AF_INET
	binary.NativeEndian.PutUint32(hdr[4:], uint32(up.Index))
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETADDR, Flags: netlink.Request | netlink.Dump},
		Data:   hdr,
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading the IPv4 addresses of %s: %w", up.Name, err)
	}
	var addrs []ifAddr
	for _, m := range msgs {
		if a, ok := parseIfAddr(m.Data); ok && a.index == up.Index {
			addrs = append(addrs, a)
		}
	}
	return pickSource(addrs, ip), nil
}

// parseIfAddr reads an RTM_NEWADDR message of the IPv4 family: its local
// address (IFA_LOCAL, else IFA_ADDRESS), prefix length and flags.
func parseIfAddr(b []byte) (ifAddr, bool) {
	if len(b) < unix.SizeofIfAddrmsg || b[0] != unix.AF_INET {
		return ifAddr{}, false
	}
	a := ifAddr{index: int(binary.NativeEndian.Uint32(b[4:8])), secondary: b[2]&unix.IFA_F_SECONDARY != 0}
	ad, err := netlink.NewAttributeDecoder(b[unix.SizeofIfAddrmsg:])
	if err != nil {
		return ifAddr{}, false
	}
	var local, address netip.Addr
	for ad.Next() {
		switch ad.Type() {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(ad.Bytes())
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(ad.Bytes())
		case unix.IFA_FLAGS:
			a.secondary = ad.Uint32()&unix.IFA_F_SECONDARY != 0
		}
	}
	if !local.IsValid() {
		local = address
	}
	if !local.Is4() || ad.Err() != nil {
		return ifAddr{}, false
	}
	a.prefix = netip.PrefixFrom(local, int(b[1]))
	return a, true
}

// pickSource chooses as the kernel's inet_select_addr does for an on-link
// destination: a primary address in ip's subnet, else the first primary,
// else the first.
func pickSource(addrs []ifAddr, ip netip.Addr) netip.Addr {
	for _, a := range addrs {
		if !a.secondary && a.prefix.Masked().Contains(ip) {
			return a.prefix.Addr()
		}
	}
	for _, a := range addrs {
		if !a.secondary {
			return a.prefix.Addr()
		}
	}
	if len(addrs) > 0 {
		return addrs[0].prefix.Addr()
	}
	return netip.Addr{}
}
