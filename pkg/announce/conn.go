package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Conn is the transport a Sender and a probe use, as arp.New takes a
// net.PacketConn: the rounds and the probe's read loop are decided over it,
// so that a test can give them a fake and needs no root. Frames are whole:
// an Ethernet frame on a packet socket, an ICMPv6 message on an ICMPv6 one.
type Conn interface {
	WriteFrame(b []byte) error
	// ReadFrame reads one received frame into b; past the read deadline it
	// returns an error wrapping os.ErrDeadlineExceeded.
	ReadFrame(b []byte) (int, error)
	SetReadDeadline(t time.Time) error
	Close() error
}

// handover is a Conn whose socket can outlive the plugin in a detached
// child: File returns a close-on-exec duplicate for the child to inherit.
type handover interface {
	File() (*os.File, error)
}

// Sockets opens the Conns of one uplink. The zero value opens real raw
// sockets; tests put fakes in its fields.
type Sockets struct {
	// ARP opens a send-only socket for Ethernet frames carrying ARP.
	ARP func(Uplink) (Conn, error)
	// NA opens a send-only socket for ICMPv6 messages to ff02::1.
	NA func(Uplink) (Conn, error)
	// Probe opens a socket bound to the uplink that receives only the
	// frames of protocol proto that filter passes.
	Probe func(up Uplink, proto int, filter []bpf.Instruction) (Conn, error)
	// AskFrom is the uplink's own IPv4 address an IPv4 probe for ip asks
	// from, the zero Addr when it has none (see uplinkIPv4).
	AskFrom func(up Uplink, ip netip.Addr) (netip.Addr, error)
}

func (s Sockets) askFrom(up Uplink, ip netip.Addr) (netip.Addr, error) {
	if s.AskFrom != nil {
		return s.AskFrom(up, ip)
	}
	return uplinkIPv4(up, ip)
}

func (s Sockets) arp(up Uplink) (Conn, error) {
	if s.ARP != nil {
		return s.ARP(up)
	}
	return openARP(up)
}

func (s Sockets) na(up Uplink) (Conn, error) {
	if s.NA != nil {
		return s.NA(up)
	}
	return openNA(up)
}

func (s Sockets) probe(up Uplink, proto int, filter []bpf.Instruction) (Conn, error) {
	if s.Probe != nil {
		return s.Probe(up, proto, filter)
	}
	return openProbe(up, proto, filter)
}

var errSendOnly = errors.New("socket only sends")

// rawConn is a send-only raw socket that sends every frame to one address.
type rawConn struct {
	fd int
	to unix.Sockaddr
}

func (c *rawConn) WriteFrame(b []byte) error       { return unix.Sendto(c.fd, b, 0, c.to) }
func (c *rawConn) ReadFrame([]byte) (int, error)   { return 0, errSendOnly }
func (c *rawConn) SetReadDeadline(time.Time) error { return errSendOnly }
func (c *rawConn) Close() error                    { return unix.Close(c.fd) }
func (c *rawConn) File() (*os.File, error)         { return dupFile(uintptr(c.fd), "announce") }

// dupFile returns a close-on-exec duplicate of fd as a file.
func dupFile(fd uintptr, name string) (*os.File, error) {
	d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(d), name), nil
}

// openARP opens an AF_PACKET socket that only sends: protocol 0, so the
// kernel registers no receive hook for it, and no bind, since each frame
// names its interface. Binding a socket opened with a protocol (as
// packet.Listen does) makes the kernel unregister and re-register its hook,
// and the unregister waits for an RCU grace period: about a millisecond on
// an idle node, many more when every CPU is busy starting pods. Nor does it
// list addresses, as arp.Dial would (milliseconds per thousand addresses).
func openARP(up Uplink) (Conn, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// The frames carry their own Ethernet header: the address only names
	// the interface and the protocol.
	to := &unix.SockaddrLinklayer{
		Protocol: htons(unix.ETH_P_ARP), Ifindex: up.Index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	return &rawConn{fd: fd, to: to}, nil
}

// htons puts a protocol number in network byte order, as sockaddr_ll wants.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// icmpv6Filter is ICMPV6_FILTER from linux/icmpv6.h, missing from x/sys/unix.
const icmpv6Filter = 1

// openNA opens an ICMPv6 raw socket for link-local multicast out of the
// uplink. No source is bound: for a link-scope destination the kernel picks
// the uplink's link-local address, as RFC 4861 wants, whereas the announced
// addresses live on the holder device and must never be a source. Hop limit
// 255 is what receivers check to know the message was not routed.
func openNA(up Uplink) (Conn, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("setting %s: %w", o.name, err)
		}
	}
	to := &unix.SockaddrInet6{Addr: netip.IPv6LinkLocalAllNodes().As16(), ZoneId: uint32(up.Index)}
	return &rawConn{fd: fd, to: to}, nil
}

// probeConn is a bound packet socket: the probe sends on it and reads the
// answers its filter lets through.
type probeConn struct{ c *packet.Conn }

func (p probeConn) WriteFrame(b []byte) error {
	// The frame carries its own Ethernet header; the address only has to be
	// well formed for the library.
	_, err := p.c.WriteTo(b, &packet.Addr{HardwareAddr: ethernet.Broadcast})
	return err
}

func (p probeConn) ReadFrame(b []byte) (int, error) {
	n, _, err := p.c.ReadFrom(b)
	return n, err
}

func (p probeConn) SetReadDeadline(t time.Time) error { return p.c.SetReadDeadline(t) }

// Queued asks the kernel for the length of the frame at the head of the
// socket's queue (SIOCINQ, which AF_PACKET answers so): none is 0.
func (p probeConn) Queued() (bool, error) {
	rc, err := p.c.SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var ioErr error
	if err := rc.Control(func(s uintptr) { n, ioErr = unix.IoctlGetInt(int(s), unix.SIOCINQ) }); err != nil {
		return false, err
	}
	return n > 0, ioErr
}

func (p probeConn) Close() error { return p.c.Close() }

func (p probeConn) File() (*os.File, error) {
	rc, err := p.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var f *os.File
	var dupErr error
	if err := rc.Control(func(s uintptr) { f, dupErr = dupFile(s, "probe") }); err != nil {
		return nil, err
	}
	return f, dupErr
}

// openProbe listens before the probe is sent, so that an answer arriving
// before the first read is queued, not lost. Like the senders it lists no
// addresses.
func openProbe(up Uplink, proto int, filter []bpf.Instruction) (Conn, error) {
	raw, err := bpf.Assemble(filter)
	if err != nil {
		return nil, fmt.Errorf("assembling filter: %w", err)
	}
	ifi := &net.Interface{Index: up.Index, Name: up.Name}
	c, err := packet.Listen(ifi, packet.Raw, proto, &packet.Config{Filter: raw})
	if err != nil {
		return nil, fmt.Errorf("opening packet socket: %w", err)
	}
	return probeConn{c}, nil
}
