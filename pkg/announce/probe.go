package announce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Frame layout offsets: an Ethernet header, then ARP (RFC 826) or IPv6 and
// ICMPv6. The filters and parsers see untagged frames: AF_PACKET hands VLAN
// tags over out of band.
const (
	ethLen      = 14
	arpLen      = 28
	arpOpOff    = ethLen + 6
	arpSPAOff   = ethLen + 14
	arpTPAOff   = ethLen + 24
	ip6Len      = 40
	ip6NextOff  = ethLen + 6
	icmpOff     = ethLen + ip6Len
	ndTargetOff = icmpOff + 8 // type, code, checksum, then 4 bytes of flags or reserved
)

// probe asks the uplink's LAN whether another host already uses ip, waiting
// up to wait for an answer, and returns the hardware address of the first
// host that claims it, or nil if none did, and the socket it used, still
// open, for the caller to hand over (see Session) or close. An error means
// the probe could not be sent or heard, not that the address is free; the
// socket is then closed.
//
// IPv4 sends an ARP probe per RFC 5227 section 2.1.1 (sender IP 0.0.0.0, so
// that no neighbour learns anything from it) and, when from is an address
// of the uplink, the request a node sends to resolve ip (sender from): Linux
// answers a probe from 0.0.0.0 only for its local addresses (arp_process's
// special case), and answers for a proxy entry (an IP another node holds as
// a route) only a request with a sender it can route back to. Either is
// answered with an ARP whose sender IP is ip, which is taken as a claim, as
// is another host's ARP probe for ip. IPv6 sends a duplicate address
// detection neighbour solicitation per RFC 4862 section 5.4.2 (from ::, to
// ip's solicited-node group), which Linux answers for its addresses and for
// its proxy entries alike (ndisc_recv_ns), and takes as a claim a neighbour
// advertisement for ip, or another host's DAD solicitation for it (section
// 5.4.3). Frames from the uplink's own MAC never count.
//
// A proxy entry answers a broadcast (or multicast) question after a random
// delay below its interface's proxy_delay (pneigh_enqueue), 0 on a node
// running external-ip (the plugin sets it) and 0.8 s by the kernel's
// default: wait must exceed the delay of the proxies it is to see.
//
// A BPF filter on the socket passes only frames about ip that the uplink's
// own LAN sent to this node (see Incoming), so a busy LAN costs the wait
// nothing and a host of another VLAN is no conflict.
//
// Another host's probe for ip does not end the wait: an answer may still
// come, and says who holds ip, where a probe only says that another host
// is about to take it or, a node's goodbye, has just let it go. The
// result says Probing when a probe was all it heard.
func probe(open Sockets, up Uplink, ip, from netip.Addr, wait time.Duration) (*Answered, Conn, error) {
	q, err := newQuestion(up, ip, from)
	if err != nil {
		return nil, nil, fmt.Errorf("probing for %s on %s: %w", ip, up.Name, err)
	}
	c, err := open.probe(up, q.proto, q.filter)
	if err != nil {
		return nil, nil, fmt.Errorf("probing for %s on %s: %w", ip, up.Name, err)
	}
	got, err := q.ask(c, wait)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("probing for %s on %s: %w", ip, up.Name, err)
	}
	return got, c, nil
}

// question is one probe: what to send, which frames to let through, and
// which of those are a claim.
type question struct {
	proto  int
	frames [][]byte
	filter []bpf.Instruction
	claim  func([]byte) net.HardwareAddr
}

// newQuestion is the probe for ip on up; from, an IPv4 address of the
// uplink or the zero Addr, is what its IPv4 request asks from.
func newQuestion(up Uplink, ip, from netip.Addr) (question, error) {
	var q question
	var err error
	switch {
	case ip.Is4():
		q.proto, q.filter = unix.ETH_P_ARP, Incoming(up, arpAbout(ip))
		q.frames, err = arpQuestions(up.MAC, ip, from)
		q.claim = func(f []byte) net.HardwareAddr { return arpClaim(f, up.MAC, ip) }
	case ip.Is6() && !ip.Is4In6() && ip.Zone() == "":
		q.proto, q.filter = unix.ETH_P_IPV6, Incoming(up, ndAbout(ip))
		var f []byte
		f, err = dadSolicitation(up.MAC, ip)
		q.frames = [][]byte{f}
		q.claim = func(f []byte) net.HardwareAddr { return ndClaim(f, up.MAC, ip) }
	default:
		err = errors.New("not an unzoned IPv4 or IPv6 address")
	}
	return q, err
}

// arpQuestions are the RFC 5227 probe for ip and, when from is valid, the
// request a node sends to resolve ip from its address from.
func arpQuestions(mac net.HardwareAddr, ip, from netip.Addr) ([][]byte, error) {
	f, err := arpRequest(mac, netip.IPv4Unspecified(), ip)
	if err != nil || !from.IsValid() {
		return [][]byte{f}, err
	}
	if !from.Is4() {
		return nil, fmt.Errorf("asking from %s: not an IPv4 address", from)
	}
	g, err := arpRequest(mac, from, ip)
	return [][]byte{f, g}, err
}

// ask sends the probe on c, which already listens, then reads until a frame
// is an answer or wait has passed, and then what is still queued (see
// late).
func (q question) ask(c Conn, wait time.Duration) (*Answered, error) {
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	for _, f := range q.frames {
		if err := c.WriteFrame(f); err != nil {
			return nil, fmt.Errorf("sending probe: %w", err)
		}
	}
	buf := make([]byte, 9216) // a jumbo frame: a truncated NA would not parse
	var got *Answered
	for {
		n, err := c.ReadFrame(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return q.late(c, buf, got)
		}
		if err != nil {
			return nil, fmt.Errorf("reading answers: %w", err)
		}
		if q.hear(&got, buf[:n]) {
			return got, nil
		}
	}
}

// hear notes in got what frame f claims, and says whether it is an
// answer, which ends the probe; another host's probe is kept only until
// an answer comes.
func (q question) hear(got **Answered, f []byte) bool {
	mac := q.claim(f)
	if mac == nil {
		return false
	}
	if !isProbe(f) {
		*got = &Answered{MAC: mac}
		return true
	}
	if *got == nil {
		*got = &Answered{MAC: mac, Probing: true}
	}
	return false
}

// isProbe says whether a claiming frame is another host's probe (an ARP
// request from 0.0.0.0, a DAD solicitation) rather than an answer.
func isProbe(f []byte) bool {
	if binary.BigEndian.Uint16(f[12:14]) == unix.ETH_P_ARP {
		return bytes.Equal(f[arpSPAOff:arpSPAOff+4], []byte{0, 0, 0, 0})
	}
	return f[icmpOff] == ipv6TypeNS
}

// queuer is a Conn that can tell whether a received frame waits in its
// socket.
type queuer interface {
	Queued() (bool, error)
}

// late reads the frames that the socket queued but ask never read: Go
// fails a read once its deadline has passed without looking at the socket,
// so a probe descheduled past its window (a loaded node) would miss an
// answer that came in time, and take an address another host holds. The
// queue is asked first, so that no read blocks. got is what ask heard.
func (q question) late(c Conn, buf []byte, got *Answered) (*Answered, error) {
	qc, ok := c.(queuer)
	if !ok {
		return got, nil
	}
	// The filter passes only frames about the IP, but a host repeating
	// them must not keep the probe reading.
	for range lateFrames {
		if waiting, err := qc.Queued(); err != nil || !waiting {
			return got, err
		}
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			return got, err
		}
		n, err := c.ReadFrame(buf)
		if err != nil {
			return got, fmt.Errorf("reading queued answers: %w", err)
		}
		if q.hear(&got, buf[:n]) {
			return got, nil
		}
	}
	return got, nil
}

// lateFrames bounds what late reads.
const lateFrames = 64

// arpProbe returns the Ethernet frame of an RFC 5227 section 2.1.1 ARP
// probe: broadcast, operation 1, sender mac and 0.0.0.0, target hardware
// address zero, target ip; padded to the 60-byte Ethernet minimum.
func arpProbe(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	return arpRequest(mac, netip.IPv4Unspecified(), ip)
}

// arpRequest is a broadcast ARP request for ip from sender, as arpProbe's
// but for the sender address: 0.0.0.0 for a probe, the uplink's own
// address for the question a node asks when it resolves ip.
func arpRequest(mac net.HardwareAddr, sender, ip netip.Addr) ([]byte, error) {
	if len(mac) != ethernetAddrLen {
		return nil, fmt.Errorf("hardware address %q is not a 6-byte Ethernet address", mac)
	}
	p, err := arp.NewPacket(arp.OperationRequest, mac, sender, make(net.HardwareAddr, ethernetAddrLen), ip)
	if err != nil {
		return nil, err
	}
	payload, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	f := ethernet.Frame{Destination: ethernet.Broadcast, Source: mac, EtherType: ethernet.EtherTypeARP, Payload: payload}
	return f.MarshalBinary()
}

// dadSolicitation returns the Ethernet frame of an RFC 4862 section 5.4.2
// duplicate address detection: a neighbour solicitation for ip from the
// unspecified address to ip's solicited-node group, hop limit 255, with no
// source link-layer address option (RFC 4861 forbids one from ::). It is
// built whole because the kernel will not send from :: on a raw socket.
func dadSolicitation(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	if len(mac) != ethernetAddrLen {
		return nil, fmt.Errorf("hardware address %q is not a 6-byte Ethernet address", mac)
	}
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, err
	}
	src := netip.IPv6Unspecified()
	icmp, err := ndp.MarshalMessageChecksum(&ndp.NeighborSolicitation{TargetAddress: ip}, src, group)
	if err != nil {
		return nil, err
	}
	g := group.As16()
	b := make([]byte, 0, ethLen+ip6Len+len(icmp))
	// RFC 2464 section 7: 33:33 then the group's last 32 bits.
	b = append(b, 0x33, 0x33, g[12], g[13], g[14], g[15])
	b = append(b, mac...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	b = append(b, 0x60, 0, 0, 0) // version 6, traffic class 0, flow label 0
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, 255)
	b = append(b, src.AsSlice()...)
	b = append(b, g[:]...)
	return append(b, icmp...), nil
}

// ICMPv6 types of neighbour solicitation and advertisement (RFC 4861).
const (
	ipv6TypeNS = 135
	ipv6TypeNA = 136
)

// arpClaim returns the sender hardware address of an ARP frame in which
// another host claims ip: any ARP with sender IP ip, or another host's probe
// for ip (RFC 5227 section 2.1.1), which means it is about to take ip too.
// It returns nil for anything else, and for anything from ours.
func arpClaim(f []byte, ours net.HardwareAddr, ip netip.Addr) net.HardwareAddr {
	if len(f) < ethLen+arpLen || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_ARP {
		return nil
	}
	a := f[ethLen : ethLen+arpLen]
	// Ethernet hardware, IPv4 protocol, 6-byte and 4-byte addresses.
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != unix.ETH_P_IP || a[4] != 6 || a[5] != 4 {
		return nil
	}
	sha := net.HardwareAddr(a[8:14])
	spa := netip.AddrFrom4([4]byte(f[arpSPAOff : arpSPAOff+4]))
	tpa := netip.AddrFrom4([4]byte(f[arpTPAOff : arpTPAOff+4]))
	op := binary.BigEndian.Uint16(f[arpOpOff : arpOpOff+2])
	probe := op == uint16(arp.OperationRequest) && spa == netip.IPv4Unspecified() && tpa == ip
	if bytes.Equal(sha, ours) || (spa != ip && !probe) {
		return nil
	}
	return append(net.HardwareAddr(nil), sha...)
}

// ndClaim returns the hardware address of a host that claims ip in an
// ICMPv6 frame: a neighbour advertisement for ip (its target link-layer
// address option, else the Ethernet source), or another host's DAD
// solicitation for ip (RFC 4862 section 5.4.3). Messages whose hop limit is
// not 255 were routed and are ignored, as RFC 4861 section 7.1 requires.
func ndClaim(f []byte, ours net.HardwareAddr, ip netip.Addr) net.HardwareAddr {
	if len(f) < icmpOff || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_IPV6 {
		return nil
	}
	h := f[ethLen:icmpOff]
	end := icmpOff + int(binary.BigEndian.Uint16(h[4:6]))
	if h[0]>>4 != 6 || h[6] != unix.IPPROTO_ICMPV6 || h[7] != 255 || end > len(f) {
		return nil
	}
	m, err := ndp.ParseMessage(f[icmpOff:end])
	if err != nil {
		return nil
	}
	mac := net.HardwareAddr(f[6:12])
	switch m := m.(type) {
	case *ndp.NeighborAdvertisement:
		if m.TargetAddress != ip {
			return nil
		}
		for _, o := range m.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
				mac = lla.Addr
			}
		}
	case *ndp.NeighborSolicitation:
		src := netip.AddrFrom16([16]byte(h[8:24]))
		if m.TargetAddress != ip || src != netip.IPv6Unspecified() {
			return nil
		}
	default:
		return nil
	}
	if bytes.Equal(mac, ours) || bytes.Equal(f[6:12], ours) {
		return nil
	}
	return append(net.HardwareAddr(nil), mac...)
}
