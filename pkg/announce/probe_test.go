package announce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/test/wire"
)

// otherMAC is another host on the LAN.
var otherMAC = net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}

func TestARPProbeIsAnRFC5227ProbeThatTeachesNobodyAnything(t *testing.T) {
	want := join(
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Ethernet dst: broadcast
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // Ethernet src: uplink MAC
		[]byte{0x08, 0x06},                         // ethertype: ARP
		[]byte{0x00, 0x01},                         // htype: Ethernet
		[]byte{0x08, 0x00},                         // ptype: IPv4
		[]byte{0x06},                               // hlen
		[]byte{0x04},                               // plen
		[]byte{0x00, 0x01},                         // op: request
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // sha: uplink MAC
		[]byte{0, 0, 0, 0},                         // spa: 0.0.0.0, so that no cache learns the IP from a probe
		[]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, // tha: zero
		[]byte{198, 51, 100, 7},                    // tpa: the IP probed for
		padding,
	)
	got, err := arpProbe(testMAC, testIP4)
	if err != nil {
		t.Fatalf("arpProbe(%s, %s) failed: %v", testMAC, testIP4, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ARP probe differs from RFC 5227 section 2.1.1\n got: % x\nwant: % x", got, want)
	}
}

func TestDADSolicitationIsAnRFC4862ProbeFromTheUnspecifiedAddress(t *testing.T) {
	group := []byte{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x00, 0x00, 0x07} // ff02::1:ff00:7
	want := join(
		[]byte{0x33, 0x33, 0xff, 0x00, 0x00, 0x07}, // Ethernet dst: 33:33 + the group's last 32 bits (RFC 2464)
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // Ethernet src: uplink MAC
		[]byte{0x86, 0xdd},                         // ethertype: IPv6
		[]byte{0x60, 0x00, 0x00, 0x00},             // version 6, traffic class 0, flow label 0
		[]byte{0x00, 0x18},                         // payload length: 24, the NS with no option
		[]byte{58},                                 // next header: ICMPv6
		[]byte{255},                                // hop limit: 255, or receivers drop it
		make([]byte, 16),                           // source: ::, as DAD requires
		group,                                      // destination: solicited-node group of the target
		[]byte{135},                                // type: neighbour solicitation
		[]byte{0},                                  // code
		[]byte{0x4c, 0xe1},                         // checksum over the pseudo-header with source ::
		[]byte{0, 0, 0, 0},                         // reserved
		[]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07}, // target: 2001:db8::7
		// no source link-layer address option: RFC 4861 forbids it from ::
	)
	got, err := dadSolicitation(testMAC, testIP6)
	if err != nil {
		t.Fatalf("dadSolicitation(%s, %s) failed: %v", testMAC, testIP6, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("DAD solicitation differs from RFC 4862 section 5.4.2\n got: % x\nwant: % x", got, want)
	}
	if sum := wire.ICMPv6Sum(netip.IPv6Unspecified(), netip.AddrFrom16([16]byte(group)), want[54:]); sum != 0xffff {
		t.Errorf("the golden checksum does not verify (sum %#04x): receivers would drop the probe", sum)
	}
}

func TestProbeRefusesBadInputBeforeOpeningASocket(t *testing.T) {
	up := Uplink{Name: "up0", Index: 1, MAC: testMAC}
	short := Uplink{Name: "up0", Index: 1, MAC: testMAC[:3]}
	for _, tc := range []struct {
		name string
		up   Uplink
		ip   netip.Addr
	}{
		{"the zero address", up, netip.Addr{}},
		{"an IPv4-mapped IPv6 address", up, netip.MustParseAddr("::ffff:198.51.100.7")},
		{"a zoned address", up, netip.MustParseAddr("fe80::1%up0")},
		{"IPv4 with a short MAC", short, testIP4},
		{"IPv6 with a short MAC", short, testIP6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opened := Sockets{Probe: func(Uplink, int, []bpf.Instruction) (Conn, error) {
				t.Errorf("a socket was opened for %s", tc.ip)
				return nil, errors.New("no socket")
			}}
			if got, _, err := probe(opened, tc.up, tc.ip, netip.Addr{}, time.Millisecond); err == nil {
				t.Errorf("probe(%q, %s) = %v, nil; want an error", tc.up.MAC, tc.ip, got.hardware())
			}
		})
	}
}

func TestProbeSendsItsFrameThenTakesTheFirstClaimAmongWhatItReads(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	any4 := netip.IPv4Unspecified()
	n := newFakeNet(t)
	n.answers = [][]byte{
		arpFrameOf(t, arp.OperationRequest, otherMAC, netip.MustParseAddr("198.51.100.1"), zero, testIP4), // asks, claims nothing
		arpFrameOf(t, arp.OperationRequest, testMAC, testIP4, zero, testIP4),                              // our own
		arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, any4),                               // the claim
	}
	const wait = time.Hour
	before := time.Now()
	got, c, err := probe(n.sockets(), Uplink{Name: "up0", Index: 1, MAC: testMAC}, testIP4, netip.Addr{}, wait)
	if err != nil {
		t.Fatal(err)
	}
	mac := got.hardware()
	if !bytes.Equal(mac, otherMAC) {
		t.Errorf("probe = %v, want the claiming host %s", mac, otherMAC)
	}
	fc := n.of("probe")[0]
	want, _ := arpProbe(testMAC, testIP4)
	if len(fc.written) != 1 || !bytes.Equal(fc.written[0], want) {
		t.Errorf("probe wrote % x, want one RFC 5227 probe", fc.written)
	}
	if fc.deadline.Before(before.Add(wait)) {
		t.Errorf("read deadline %s is not the wait (%s) after the start", fc.deadline, wait)
	}
	if c == nil || fc.isClosed() {
		t.Error("probe closed its socket, or did not return it for the hand-over")
	}
}

// hardware is the MAC of who answered, nil when nobody did.
func (a *Answered) hardware() net.HardwareAddr {
	if a == nil {
		return nil
	}
	return a.MAC
}

// TestAnAnswerOutweighsAProbeHeardBeforeIt: another host's probe heard
// first does not end the probe, since the holder's answer may still come
// and says who to stand by for; a probe heard alone is reported as such,
// for each family.
func TestAnAnswerOutweighsAProbeHeardBeforeIt(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	any4, any6 := netip.IPv4Unspecified(), netip.IPv6Unspecified()
	all := netip.IPv6LinkLocalAllNodes()
	holder := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	lla := []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: holder}}
	probe4 := arpFrameOf(t, arp.OperationRequest, otherMAC, any4, zero, testIP4)
	probe6 := ndFrameOf(t, otherMAC, any6, all, 255, &ndp.NeighborSolicitation{TargetAddress: testIP6})
	for _, tc := range []struct {
		name   string
		ip     netip.Addr
		frames [][]byte
		want   Answered
	}{
		{"IPv4 probe, then answer", testIP4, [][]byte{probe4, arpFrameOf(t, arp.OperationReply, holder, testIP4, testMAC, any4)}, Answered{MAC: holder}},
		{"IPv4 probe alone", testIP4, [][]byte{probe4}, Answered{MAC: otherMAC, Probing: true}},
		{"IPv6 DAD, then advertisement", testIP6, [][]byte{probe6, ndFrameOf(t, holder, testIP6, all, 255, &ndp.NeighborAdvertisement{TargetAddress: testIP6, Options: lla})}, Answered{MAC: holder}},
		{"IPv6 DAD alone", testIP6, [][]byte{probe6}, Answered{MAC: otherMAC, Probing: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNet(t)
			n.answers = tc.frames
			got, _, err := probe(n.sockets(), Uplink{Name: "up0", Index: 1, MAC: testMAC}, tc.ip, netip.Addr{}, time.Millisecond)
			if err != nil || got == nil || !bytes.Equal(got.MAC, tc.want.MAC) || got.Probing != tc.want.Probing {
				t.Errorf("probe = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestProbeHearingNoClaimReturnsNilAtTheDeadlineAndKeepsTheSocket(t *testing.T) {
	n := newFakeNet(t)
	n.answers = [][]byte{ndFrameOf(t, otherMAC, netip.MustParseAddr("fe80::aa"), netip.IPv6LinkLocalAllNodes(), 64,
		&ndp.NeighborAdvertisement{TargetAddress: testIP6})} // routed: not a claim
	got, c, err := probe(n.sockets(), Uplink{Name: "up0", Index: 1, MAC: testMAC}, testIP6, netip.Addr{}, time.Millisecond)
	if err != nil || got != nil || c == nil {
		t.Fatalf("probe = %v, %v, %v; want no claim, the socket, no error", got, c, err)
	}
	if got := n.of("probe")[0].written; len(got) != 1 || got[0][12] != 0x86 {
		t.Errorf("probe wrote % x, want one IPv6 DAD solicitation", got)
	}
}

func TestProbeThatCannotSendClosesItsSocketAndSaysWhy(t *testing.T) {
	n := newFakeNet(t)
	s := n.sockets()
	s.Probe = func(Uplink, int, []bpf.Instruction) (Conn, error) {
		c, _ := n.open("probe", true)
		c.(packetConn).writeErr = unix.ENETDOWN
		return c, nil
	}
	_, c, err := probe(s, Uplink{Name: "up0", Index: 1, MAC: testMAC}, testIP4, netip.Addr{}, time.Millisecond)
	if !errors.Is(err, unix.ENETDOWN) || c != nil || !strings.Contains(err.Error(), "up0") {
		t.Errorf("probe = %v, %v; want ENETDOWN naming up0 and no socket", c, err)
	}
	if !n.of("probe")[0].isClosed() {
		t.Error("a failed probe left its socket open")
	}
}

// arpFrameOf builds an ARP frame as another host would send it.
func arpFrameOf(t *testing.T, op arp.Operation, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := p.MarshalBinary()
	f, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: sha, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestProbeTakesAsAnIPv4ClaimOnlyAnotherHostUsingOrProbingForIt(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	any4 := netip.IPv4Unspecified()
	asker := netip.MustParseAddr("198.51.100.1")
	other := netip.MustParseAddr("198.51.100.9")
	for _, tc := range []struct {
		name  string
		frame []byte
		want  net.HardwareAddr
	}{
		{"a reply to the probe", arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, any4), otherMAC},
		{"a gratuitous request", arpFrameOf(t, arp.OperationRequest, otherMAC, testIP4, zero, testIP4), otherMAC},
		{"a request asking another address", arpFrameOf(t, arp.OperationRequest, otherMAC, testIP4, zero, asker), otherMAC},
		{"another host's probe for the IP", arpFrameOf(t, arp.OperationRequest, otherMAC, any4, zero, testIP4), otherMAC},
		{"another host asking who has the IP", arpFrameOf(t, arp.OperationRequest, otherMAC, asker, zero, testIP4), nil},
		{"another host's probe for another IP", arpFrameOf(t, arp.OperationRequest, otherMAC, any4, zero, other), nil},
		{"a reply about another IP", arpFrameOf(t, arp.OperationReply, otherMAC, other, testMAC, any4), nil},
		{"our own gratuitous request", arpFrameOf(t, arp.OperationRequest, testMAC, testIP4, zero, testIP4), nil},
		{"our own probe", arpFrameOf(t, arp.OperationRequest, testMAC, any4, zero, testIP4), nil},
		{"a truncated frame", arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, any4)[:40], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := arpClaim(tc.frame, testMAC, testIP4); !bytes.Equal(got, tc.want) {
				t.Errorf("arpClaim(% x) = %v, want %v", tc.frame, got, tc.want)
			}
		})
	}
}

// ndFrameOf builds an IPv6 neighbour discovery frame as another host would
// send it, with a correct checksum.
func ndFrameOf(t *testing.T, src net.HardwareAddr, from, to netip.Addr, hops byte, m ndp.Message) []byte {
	t.Helper()
	icmp, err := ndp.MarshalMessageChecksum(m, from, to)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte{0x33, 0x33, 0, 0, 0, 1}, src...)
	b = append(b, 0x86, 0xdd, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, hops)
	b = append(b, from.AsSlice()...)
	b = append(b, to.AsSlice()...)
	return append(b, icmp...)
}

func TestProbeTakesAsAnIPv6ClaimOnlyAnotherHostAdvertisingOrProbingForIt(t *testing.T) {
	lla := func(mac net.HardwareAddr) []ndp.Option {
		return []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}}
	}
	relayed := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01} // a bridge's or a proxy's source
	all := netip.IPv6LinkLocalAllNodes()
	unspec := netip.IPv6Unspecified()
	ll := netip.MustParseAddr("fe80::aa")
	group, _ := ndp.SolicitedNodeMulticast(testIP6)
	other := netip.MustParseAddr("2001:db8::9")
	na := func(target netip.Addr, opts []ndp.Option) *ndp.NeighborAdvertisement {
		return &ndp.NeighborAdvertisement{Override: true, TargetAddress: target, Options: opts}
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  net.HardwareAddr
	}{
		{"Linux's answer to DAD", ndFrameOf(t, otherMAC, testIP6, all, 255, na(testIP6, lla(otherMAC))), otherMAC},
		{"an answer whose option names another MAC", ndFrameOf(t, relayed, testIP6, all, 255, na(testIP6, lla(otherMAC))), otherMAC},
		{"an answer without an option", ndFrameOf(t, otherMAC, ll, all, 255, na(testIP6, nil)), otherMAC},
		{"another host's DAD for the IP", ndFrameOf(t, otherMAC, unspec, group, 255, &ndp.NeighborSolicitation{TargetAddress: testIP6}), otherMAC},
		{"another host resolving the IP", ndFrameOf(t, otherMAC, ll, group, 255, &ndp.NeighborSolicitation{
			TargetAddress: testIP6, Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: otherMAC}},
		}), nil},
		{"an advertisement for another IP", ndFrameOf(t, otherMAC, other, all, 255, na(other, lla(otherMAC))), nil},
		{"a routed advertisement", ndFrameOf(t, otherMAC, testIP6, all, 64, na(testIP6, lla(otherMAC))), nil},
		{"our own advertisement", ndFrameOf(t, testMAC, ll, all, 255, na(testIP6, lla(testMAC))), nil},
		{"our advertisement relayed", ndFrameOf(t, relayed, ll, all, 255, na(testIP6, lla(testMAC))), nil},
		{"a truncated frame", ndFrameOf(t, otherMAC, testIP6, all, 255, na(testIP6, lla(otherMAC)))[:70], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ndClaim(tc.frame, testMAC, testIP6); !bytes.Equal(got, tc.want) {
				t.Errorf("ndClaim(% x) = %v, want %v", tc.frame, got, tc.want)
			}
		})
	}
}

// TestProbeFiltersPassOnlyFramesAboutTheIP runs the filters in x/net/bpf's VM,
// which lacks the packet-type and interface extensions: Incoming's part,
// which needs them, is tested on real sockets.
func TestProbeFiltersPassOnlyFramesAboutTheIP(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	any4 := netip.IPv4Unspecified()
	all := netip.IPv6LinkLocalAllNodes()
	other4 := netip.MustParseAddr("198.51.100.9")
	other6 := netip.MustParseAddr("2001:db8::9")
	lla := []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: otherMAC}}
	echo := ndFrameOf(t, otherMAC, other6, all, 255, &ndp.NeighborAdvertisement{TargetAddress: testIP6, Options: lla})
	echo[54] = 128 // an echo request carrying the IP where the target would be
	for _, tc := range []struct {
		name   string
		filter []bpf.Instruction
		frame  []byte
		pass   bool
	}{
		{"ARP reply from the IP", arpAbout(testIP4), arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, any4), true},
		{"ARP probe for the IP", arpAbout(testIP4), arpFrameOf(t, arp.OperationRequest, otherMAC, any4, zero, testIP4), true},
		{"ARP about other IPs", arpAbout(testIP4), arpFrameOf(t, arp.OperationRequest, otherMAC, other4, zero, any4), false},
		{"NA for the IP", ndAbout(testIP6), ndFrameOf(t, otherMAC, testIP6, all, 255, &ndp.NeighborAdvertisement{TargetAddress: testIP6, Options: lla}), true},
		{"NS for the IP", ndAbout(testIP6), ndFrameOf(t, otherMAC, netip.IPv6Unspecified(), all, 255, &ndp.NeighborSolicitation{TargetAddress: testIP6}), true},
		{"NA for another IP", ndAbout(testIP6), ndFrameOf(t, otherMAC, other6, all, 255, &ndp.NeighborAdvertisement{TargetAddress: other6, Options: lla}), false},
		{"another ICMPv6 type", ndAbout(testIP6), echo, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm, err := bpf.NewVM(tc.filter)
			if err != nil {
				t.Fatalf("filter does not load: %v", err)
			}
			n, err := vm.Run(tc.frame)
			if err != nil {
				t.Fatalf("filter failed on % x: %v", tc.frame, err)
			}
			if (n > 0) != tc.pass {
				t.Errorf("filter kept %d bytes of % x; want pass=%v", n, tc.frame, tc.pass)
			}
		})
	}
}

// lateConn reads as Go reads a socket: once the deadline has passed every
// read fails, whatever the socket has queued; Queued says what waits.
type lateConn struct{ fakeConn }

func (c *lateConn) ReadFrame(b []byte) (int, error) {
	c.mu.Lock()
	expired := !c.deadline.IsZero() && !time.Now().Before(c.deadline)
	c.mu.Unlock()
	if expired {
		return 0, os.ErrDeadlineExceeded
	}
	return c.fakeConn.ReadFrame(b)
}

func (c *lateConn) Queued() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.toRead) > 0, nil
}

func TestProbeReadsAnAnswerQueuedInTimeThoughItsDeadlinePassedBeforeItRead(t *testing.T) {
	q, err := newQuestion(Uplink{Name: "up0", Index: 1, MAC: testMAC}, testIP4, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	zero := make(net.HardwareAddr, 6)
	notAClaim := arpFrameOf(t, arp.OperationRequest, otherMAC, netip.MustParseAddr("198.51.100.1"), zero, testIP4)
	claim := arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, netip.IPv4Unspecified())
	// A wait of 0: the deadline has passed before the first read, as when
	// the process was descheduled past its window.
	c := &lateConn{fakeConn{toRead: [][]byte{notAClaim, claim}}}
	if got, err := q.ask(c, 0); err != nil || !bytes.Equal(got.hardware(), otherMAC) {
		t.Errorf("ask = %v, %v; want the claim queued before the deadline (%s)", got, err, otherMAC)
	}
	quiet := &lateConn{fakeConn{toRead: [][]byte{notAClaim, notAClaim}}}
	if mac, err := q.ask(quiet, 0); err != nil || mac != nil || len(quiet.toRead) != 0 {
		t.Errorf("ask = %v, %v with %d frames unread; want no claim, every queued frame read", mac, err, len(quiet.toRead))
	}
}

// uplinkAddr is the uplink's own IPv4 address in the tests that give it
// one.
var uplinkAddr = netip.MustParseAddr("198.51.100.1")

// A node holding an IP as a route answers only a request it can route back
// to (arp_process answers 0.0.0.0 for local addresses alone): the IPv4
// probe also asks as the node would, from the uplink's own address.
func TestTheIPv4ProbeAlsoAsksAsTheNodeWouldFromTheUplinksAddress(t *testing.T) {
	want := join(
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Ethernet dst: broadcast: the holder is unknown
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // Ethernet src: uplink MAC
		[]byte{0x08, 0x06},                         // ethertype: ARP
		[]byte{0x00, 0x01, 0x08, 0x00, 0x06, 0x04}, // Ethernet, IPv4, 6, 4
		[]byte{0x00, 0x01},                         // op: request
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // sha: uplink MAC
		[]byte{198, 51, 100, 1},                    // spa: the uplink's own address, which a proxy can route back to
		[]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, // tha: zero
		[]byte{198, 51, 100, 7},                    // tpa: the IP probed for
		padding,
	)
	n := newFakeNet(t)
	n.from = uplinkAddr
	s := NewSession(SessionOptions{Sockets: n.sockets(), Start: (&starts{t: t}).start})
	defer s.Finish(false)
	if err := s.Probe(Target{testIP4, Uplink{Name: "up0", Index: 1, MAC: testMAC}}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	probe, _ := arpProbe(testMAC, testIP4)
	got := n.of("probe")[0].written
	if len(got) != 2 || !bytes.Equal(got[0], probe) || !bytes.Equal(got[1], want) {
		t.Errorf("the IPv4 probe wrote\n% x\nwant the RFC 5227 probe, then\n% x", got, want)
	}
}

// With no IPv4 address on the uplink there is nothing to ask from: the
// probe is the RFC 5227 one alone, and the log says what it cannot see.
func TestAnUplinkWithoutIPv4AddressProbesFromZeroAndSaysWhatItCannotSee(t *testing.T) {
	n := newFakeNet(t)
	var logs bytes.Buffer
	s := NewSession(SessionOptions{Sockets: n.sockets(), Start: (&starts{t: t}).start, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer s.Finish(false)
	if err := s.Probe(Target{testIP4, Uplink{Name: "up0", Index: 1, MAC: testMAC}}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := n.of("probe")[0].written; len(got) != 1 {
		t.Errorf("the probe wrote %d frames, want the RFC 5227 probe alone", len(got))
	}
	if !strings.Contains(logs.String(), "no IPv4 address") || !strings.Contains(logs.String(), "as a route") {
		t.Errorf("the log does not say the probe cannot see a holder by route:\n%s", logs.String())
	}
	n.from = netip.MustParseAddr("2001:db8::1")
	if err := s.Probe(Target{testIP4, Uplink{Name: "up0", Index: 1, MAC: testMAC}}, time.Millisecond); !errors.Is(err, ErrAnnounce) {
		t.Errorf("a probe asking from an IPv6 address: %v, want ErrAnnounce", err)
	}
}

// A proxy's answer to the node's request is a reply from the IP to the
// uplink's own address: a claim, as the answer to the RFC 5227 probe is.
func TestAProxysAnswerToTheNodesRequestIsAClaim(t *testing.T) {
	reply := arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, uplinkAddr)
	if got := arpClaim(reply, testMAC, testIP4); !bytes.Equal(got, otherMAC) {
		t.Errorf("arpClaim(a proxy's reply to the uplink's address) = %v, want %s", got, otherMAC)
	}
	ours, _ := arpRequest(testMAC, uplinkAddr, testIP4)
	if got := arpClaim(ours, otherMAC, testIP4); got != nil {
		t.Errorf("arpClaim(another node's request for the IP) = %v, want no claim: it only asks", got)
	}
}

func TestTheUplinksOwnAddressIsTheOneAsANodeWouldChooseIt(t *testing.T) {
	a := func(p string, secondary bool) ifAddr {
		return ifAddr{prefix: netip.MustParsePrefix(p), index: 2, secondary: secondary}
	}
	ip := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		name  string
		addrs []ifAddr
		want  string
	}{
		{"none", nil, "invalid IP"},
		{"the one of the IP's subnet", []ifAddr{a("10.0.0.1/8", false), a("192.0.2.1/24", false)}, "192.0.2.1"},
		{"a primary before a secondary of the subnet", []ifAddr{a("10.0.0.1/8", false), a("192.0.2.9/24", true)}, "10.0.0.1"},
		{"the first primary when none holds the IP", []ifAddr{a("10.0.0.9/32", true), a("10.0.0.1/8", false)}, "10.0.0.1"},
		{"a secondary when that is all", []ifAddr{a("10.0.0.9/8", true)}, "10.0.0.9"},
	} {
		if got := pickSource(tc.addrs, ip).String(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestAnAddressMessageIsReadForItsLocalAddressPrefixAndFlags(t *testing.T) {
	msg := func(family byte, index uint32, attrs func(*netlink.AttributeEncoder)) []byte {
		h := make([]byte, unix.SizeofIfAddrmsg)
		h[0], h[1] = family, 24
		binary.NativeEndian.PutUint32(h[4:], index)
		ae := netlink.NewAttributeEncoder()
		attrs(ae)
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return append(h, b...)
	}
	ptp := msg(unix.AF_INET, 3, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(unix.IFA_ADDRESS, []byte{192, 0, 2, 254}) // the peer, on a point-to-point link
		ae.Bytes(unix.IFA_LOCAL, []byte{192, 0, 2, 1})
		ae.Uint32(unix.IFA_FLAGS, unix.IFA_F_SECONDARY)
	})
	a, ok := parseIfAddr(ptp)
	if !ok || a.prefix != netip.MustParsePrefix("192.0.2.1/24") || a.index != 3 || !a.secondary {
		t.Errorf("parseIfAddr = %+v, %v; want 192.0.2.1/24 on 3, secondary", a, ok)
	}
	v6 := msg(unix.AF_INET6, 3, func(ae *netlink.AttributeEncoder) { ae.Bytes(unix.IFA_ADDRESS, make([]byte, 16)) })
	if _, ok := parseIfAddr(v6); ok {
		t.Error("an IPv6 address was read as an IPv4 one")
	}
	if _, ok := parseIfAddr(ptp[:5]); ok {
		t.Error("a truncated message was read")
	}
}
