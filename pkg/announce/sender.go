package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Uplink is the interface announcements go out on, in the network namespace
// of the thread that opens the sockets.
type Uplink struct {
	Name   string
	Index  int
	MAC    net.HardwareAddr
	Router bool // IPv6 forwarding is on for this interface: sets the NA Router flag
}

// Sender sends announcement rounds on one uplink over raw sockets. It is not
// safe for concurrent use.
type Sender struct {
	up   Uplink
	arp  int // AF_PACKET, opened on the first IPv4 address; -1 until then
	icmp int // ICMPv6 raw socket, opened on the first IPv6 address; -1 until then
}

// NewSender returns a Sender for up. It opens nothing: a round opens only the
// sockets its addresses need, so an IPv4-only node never needs IPv6 and the
// reverse.
func NewSender(up Uplink) *Sender {
	return &Sender{up: up, arp: -1, icmp: -1}
}

// Round sends one announcement round: both gratuitous ARP frames for each
// IPv4 address and one unsolicited neighbour advertisement for each IPv6
// address. A failure stops that family's part of the round, since the rest
// would fail the same way, but not the other family's; both are returned.
func (s *Sender) Round(ips []netip.Addr) error {
	var v4, v6 []netip.Addr
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return errors.Join(s.roundARP(v4), s.roundNA(v6))
}

// Close closes the sockets opened so far.
func (s *Sender) Close() error {
	var errs []error
	if s.arp >= 0 {
		errs = append(errs, unix.Close(s.arp))
		s.arp = -1
	}
	if s.icmp >= 0 {
		errs = append(errs, unix.Close(s.icmp))
		s.icmp = -1
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing announcement sockets on %s: %w", s.up.Name, err)
	}
	return nil
}

// Release hands the sockets opened so far to the caller as files, for a
// detached child to inherit, and closes the Sender's own descriptors.
//
// Why: Linux waits for an RCU grace period (synchronize_net) when the last
// reference to an AF_PACKET socket goes, 10 to 13 ms here. Closed by the
// plugin, that wait would sit on every IPv4 ADD; held by a child until it
// exits, it costs the ADD nothing. The caller closes the returned files
// once the child has started.
func (s *Sender) Release() ([]*os.File, error) {
	var files []*os.File
	if s.arp >= 0 {
		fd, err := unix.FcntlInt(uintptr(s.arp), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("handing over the ARP socket on %s: %w", s.up.Name, err)
		}
		files = append(files, os.NewFile(uintptr(fd), "arp"))
	}
	return files, s.Close()
}

// HasPacketSocket says whether the Sender holds a socket whose close is
// slow enough to be worth handing to a child (see Release).
func (s *Sender) HasPacketSocket() bool { return s.arp >= 0 }

func (s *Sender) roundARP(ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	if s.arp < 0 {
		c, err := openARP()
		if err != nil {
			return fmt.Errorf("opening ARP socket on %s: %w", s.up.Name, err)
		}
		s.arp = c
	}
	// The frames carry their own Ethernet header: the address only names
	// the interface and the protocol.
	to := &unix.SockaddrLinklayer{
		Protocol: htons(unix.ETH_P_ARP), Ifindex: s.up.Index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	for _, ip := range ips {
		frames, err := GratuitousARP(s.up.MAC, ip)
		if err != nil {
			return err
		}
		for _, f := range frames {
			if err := unix.Sendto(s.arp, f, 0, to); err != nil {
				return fmt.Errorf("sending gratuitous ARP for %s on %s: %w", ip, s.up.Name, err)
			}
		}
	}
	return nil
}

func (s *Sender) roundNA(ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	if s.icmp < 0 {
		fd, err := openICMPv6(s.up)
		if err != nil {
			return fmt.Errorf("opening ICMPv6 socket on %s: %w", s.up.Name, err)
		}
		s.icmp = fd
	}
	to := &unix.SockaddrInet6{Addr: netip.IPv6LinkLocalAllNodes().As16(), ZoneId: uint32(s.up.Index)}
	for _, ip := range ips {
		msg, err := UnsolicitedNA(s.up.MAC, ip, s.up.Router)
		if err != nil {
			return err
		}
		if err := unix.Sendto(s.icmp, msg, 0, to); err != nil {
			if errors.Is(err, unix.EADDRNOTAVAIL) {
				// The kernel found no source: the uplink's link-local
				// address is missing, or still tentative during DAD.
				err = fmt.Errorf("no usable IPv6 link-local address: %w", err)
			}
			return fmt.Errorf("sending neighbour advertisement for %s on %s: %w", ip, s.up.Name, err)
		}
	}
	return nil
}

// openARP opens an AF_PACKET socket that only sends: protocol 0, so the
// kernel registers no receive hook for it, and no bind, since each frame
// names its interface. Binding a socket opened with a protocol (as
// packet.Listen does) makes the kernel unregister and re-register its hook,
// and the unregister waits for an RCU grace period: about a millisecond on
// an idle node, many more when every CPU is busy starting pods. Nor does it
// list addresses, as arp.Dial would (milliseconds per thousand addresses).
func openARP() (int, error) {
	return unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
}

// htons puts a protocol number in network byte order, as sockaddr_ll wants.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// icmpv6Filter is ICMPV6_FILTER from linux/icmpv6.h, missing from x/sys/unix.
const icmpv6Filter = 1

// openICMPv6 opens an ICMPv6 raw socket for link-local multicast out of the
// uplink. No source is bound: for a link-scope destination the kernel picks
// the uplink's link-local address, as RFC 4861 wants, whereas the announced
// addresses live on the holder device and must never be a source. Hop limit
// 255 is what receivers check to know the message was not routed.
func openICMPv6(up Uplink) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return -1, err
	}
	// Bit set means blocked on Linux: this socket only sends.
	var blockAll unix.ICMPv6Filter
	for i := range blockAll.Data {
		blockAll.Data[i] = ^uint32(0)
	}
	opts := []struct {
		name string
		set  func() error
	}{
		{"SO_BINDTODEVICE", func() error { return unix.BindToDevice(fd, up.Name) }},
		{"IPV6_MULTICAST_IF", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, up.Index) }},
		{"IPV6_MULTICAST_HOPS", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255) }},
		{"IPV6_UNICAST_HOPS", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 255) }},
		// The node's own stack has no use for its announcements.
		{"IPV6_MULTICAST_LOOP", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 0) }},
		{"ICMPV6_FILTER", func() error { return unix.SetsockoptICMPv6Filter(fd, unix.IPPROTO_ICMPV6, icmpv6Filter, &blockAll) }},
	}
	for _, o := range opts {
		if err := o.set(); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("setting %s: %w", o.name, err)
		}
	}
	return fd, nil
}
