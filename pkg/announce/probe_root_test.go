package announce

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// probeWait is short: a LAN host on a veth answers within a millisecond.
const probeWait = 200 * time.Millisecond

// probeSlack is how much longer than its wait a probe that hears nothing
// may take: socket set-up and a loaded -race run.
const probeSlack = 500 * time.Millisecond

// lanHolds puts ip on the LAN end, as another host that already uses it.
func (l *link) lanHolds(t *testing.T, addr netip.Addr) {
	t.Helper()
	args := []string{"-n", l.lanName(), "addr", "add", addr.String() + "/24", "dev", lanIf}
	if addr.Is6() {
		args = []string{"-n", l.lanName(), "addr", "add", addr.String() + "/64", "dev", lanIf, "nodad"}
	}
	ip(t, args...)
	if addr.Is6() {
		l.waitLANMulticast(t)
		l.waitLANJoined(t, addr)
	}
}

// waitLANJoined waits for the LAN end to have joined addr's solicited-node
// group: even with nodad the kernel joins it from its address work queue
// (addrconf_dad_begin), which a loaded machine runs late, and until then
// the LAN end drops the probe's solicitation, which asks once.
func (l *link) waitLANJoined(t *testing.T, addr netip.Addr) {
	t.Helper()
	a := addr.As16()
	group := netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", l.lanName(), "-6", "maddr", "show", "dev", lanIf).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); err == nil && len(f) >= 2 && f[0] == "inet6" && f[1] == group.String() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s joined no %s (the solicited-node group of %s) within 5s: %v %s", lanIf, group, addr, err, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLANMulticast waits for the LAN end's multicast route: the kernel adds
// it once linkwatch reports carrier, up to a second after the link comes up,
// and until then drops the solicited-node multicast a DAD probe goes to.
func (l *link) waitLANMulticast(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", l.lanName(), "-6", "route", "show", "table", "local", "dev", lanIf).CombinedOutput()
		if err == nil && strings.Contains(string(out), "multicast ff00::/8") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s got no IPv6 multicast route within 3s: %s", lanIf, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *link) lanName() string { return filepath.Base(l.lan.Path()) }

// lanMAC is the LAN end's hardware address, the one a conflict must name.
func (l *link) lanMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	err := l.lan.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(lanIf)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	})
	if err != nil {
		t.Fatalf("reading %s: %v", lanIf, err)
	}
	return mac
}

// probeOnce probes on real sockets, asking as the node would from the
// uplink's IPv4 address, and closes the socket.
func probeOnce(open Sockets, up Uplink, ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	var from netip.Addr
	if ip.Is4() {
		var err error
		if from, err = open.askFrom(up, ip); err != nil {
			return nil, err
		}
	}
	got, c, err := probe(open, up, ip, from, wait)
	if c != nil {
		c.Close()
	}
	return got.hardware(), err
}

// probeFromNode probes in the node namespace and times it.
func (l *link) probeFromNode(t *testing.T, ip netip.Addr, wait time.Duration) (net.HardwareAddr, time.Duration) {
	t.Helper()
	var mac net.HardwareAddr
	var took time.Duration
	l.inNode(t, func() error {
		start := time.Now()
		var err error
		mac, err = probeOnce(Sockets{}, l.uplink, ip, wait)
		took = time.Since(start)
		return err
	})
	return mac, took
}

var probeIPs = []netip.Addr{testIP4, testIP6}

func TestProbeNamesTheLANHostThatHoldsTheAddress(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			l.lanHolds(t, addr)
			want := l.lanMAC(t)
			got, took := l.probeFromNode(t, addr, 2*time.Second)
			if !bytes.Equal(got, want) {
				t.Fatalf("Probe(%s) = %v, want the LAN host's %s", addr, got, want)
			}
			if took >= time.Second {
				t.Errorf("Probe(%s) took %s to hear an answer that comes within milliseconds: it waits past the first", addr, took)
			}
		})
	}
}

func TestProbeHearsNobodyAndReturnsNilAfterItsWait(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			// The LAN host has addresses next to addr but not addr.
			l.lanHolds(t, addr.Next())
			got, took := l.probeFromNode(t, addr, probeWait)
			if got != nil {
				t.Fatalf("Probe(%s) = %s, want nil: nobody holds it", addr, got)
			}
			if took < probeWait || took > probeWait+probeSlack {
				t.Errorf("Probe(%s) took %s, want its wait %s (+%s)", addr, took, probeWait, probeSlack)
			}
		})
	}
}

// probeWhileSending probes for addr from the node and runs send once the
// probe has sent its own frame, so that its socket was open and filtering
// before send's frames went out. It fails the test if the probe heard no
// claim and had stopped listening before send returned: then it proves
// nothing about those frames.
func (l *link) probeWhileSending(t *testing.T, addr netip.Addr, wait time.Duration, send func()) net.HardwareAddr {
	t.Helper()
	listening := make(chan struct{})
	open := Sockets{Probe: func(up Uplink, proto int, filter []bpf.Instruction) (Conn, error) {
		c, err := openProbe(up, proto, filter)
		if err != nil {
			return nil, err
		}
		return signalConn{Conn: c, wrote: listening}, nil
	}}
	var got net.HardwareAddr
	var ended time.Time
	res := make(chan error, 1)
	go func() {
		// A new goroutine may run on any thread: it must enter the node's
		// namespace itself, or it would probe the machine's own interface
		// of the same index.
		res <- l.node.Do(func(ns.NetNS) error {
			var err error
			got, err = probeOnce(open, l.uplink, addr, wait)
			ended = time.Now()
			return err
		})
	}()
	select {
	case <-listening:
	case err := <-res:
		t.Fatalf("the probe ended before it sent its frame: %v", err)
	}
	send()
	sent := time.Now()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if got == nil && !ended.After(sent) {
		t.Fatalf("the probe for %s ended at %s, before the frames were out (%s): it proves nothing", addr, ended, sent)
	}
	return got
}

// signalConn closes wrote once the probe has written its frame: its socket
// is then open, filtered and reading.
type signalConn struct {
	Conn
	wrote chan struct{}
}

func (c signalConn) WriteFrame(b []byte) error {
	err := c.Conn.WriteFrame(b)
	close(c.wrote)
	return err
}

// listenWait is how long a probe that must hear the frames of a test listens:
// generous, since those frames only have to get out within it.
const listenWait = 2 * time.Second

// TestProbeIgnoresTheNodesOwnAnnouncements sends the node's gratuitous ARP
// and unsolicited NA for the address while it probes: its own frames (seen
// by every packet socket on the way out) must not look like another owner.
func TestProbeIgnoresTheNodesOwnAnnouncements(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			got := l.probeWhileSending(t, addr, listenWait, func() {
				l.inNode(t, func() error {
					s := NewSender(l.uplink)
					defer s.Close()
					return s.Round([]netip.Addr{addr})
				})
			})
			if got != nil {
				t.Errorf("probe(%s) = %s: it took the node's own announcement (from %s) for a conflict", addr, got, l.uplink.MAC)
			}
		})
	}
}

// TestProbeTreatsAnotherHostsProbeAsAConflict has the LAN host probe for the
// same address while the node does, as two hosts taking it at once would:
// RFC 5227 section 2.1.1 and RFC 4862 section 5.4.3 make both back off.
func TestProbeTreatsAnotherHostsProbeAsAConflict(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			lanMAC := l.lanMAC(t)
			frame, proto := lanProbe(t, lanMAC, addr)
			c := l.lanSender(t, proto)
			got := l.probeWhileSending(t, addr, listenWait, func() {
				if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[:6]}); err != nil {
					t.Errorf("sending the LAN host's probe: %v", err)
				}
			})
			if !bytes.Equal(got, lanMAC) {
				t.Errorf("probe(%s) = %v while %s probed for it too, want %s", addr, got, lanMAC, lanMAC)
			}
		})
	}
}

func lanProbe(t *testing.T, mac net.HardwareAddr, addr netip.Addr) ([]byte, int) {
	t.Helper()
	if addr.Is4() {
		f, err := arpProbe(mac, addr)
		if err != nil {
			t.Fatal(err)
		}
		return f, unix.ETH_P_ARP
	}
	f, err := dadSolicitation(mac, addr)
	if err != nil {
		t.Fatal(err)
	}
	return f, unix.ETH_P_IPV6
}

// TestProbeIgnoresAClaimOnAnotherVLAN: a host on VLAN 200 of a trunk
// uplink (no VLAN device for 200 on the node, so the kernel delivers the
// frame untagged as PACKET_OTHERHOST) uses the same IP in another L2
// domain. The node's untagged LAN has nobody on it: the probe must not
// refuse the IP.
func TestProbeIgnoresAClaimOnAnotherVLAN(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			frame, proto := lanClaim(t, l.lanMAC(t), addr)
			frame = tagged(frame, 200)
			c := l.lanSender(t, proto)
			got := l.probeWhileSending(t, addr, probeWait, func() {
				if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[:6]}); err != nil {
					t.Errorf("sending: %v", err)
				}
			})
			if got != nil {
				t.Errorf("probe(%s) = %s: it took a frame of VLAN 200, another LAN, for a conflict on the untagged uplink", addr, got)
			}
		})
	}
}

// lanClaim is the frame in which the LAN host claims addr, and its
// protocol: its gratuitous ARP reply, or an unsolicited NA to all nodes.
func lanClaim(t *testing.T, mac net.HardwareAddr, addr netip.Addr) ([]byte, int) {
	t.Helper()
	if addr.Is4() {
		fs, err := GratuitousARP(mac, addr)
		if err != nil {
			t.Fatal(err)
		}
		return fs[1], unix.ETH_P_ARP
	}
	na, err := UnsolicitedNA(mac, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	// The checksum is left zero: ndp.ParseMessage does not check it.
	f := append([]byte{0x33, 0x33, 0, 0, 0, 1}, mac...)
	f = append(f, 0x86, 0xdd, 0x60, 0, 0, 0, 0, byte(len(na)), unix.IPPROTO_ICMPV6, 255)
	f = append(f, netip.MustParseAddr("fe80::99").AsSlice()...)
	f = append(f, netip.IPv6LinkLocalAllNodes().AsSlice()...)
	return append(f, na...), unix.ETH_P_IPV6
}

// TestProbeHearsAnAnswerThatCameInTimeButWasReadLate stands for a probe
// descheduled past its window on a loaded node: the LAN host's answer is
// queued in time, but Go fails a read whose deadline has passed without
// looking at the socket. The probe must still read it.
func TestProbeHearsAnAnswerThatCameInTimeButWasReadLate(t *testing.T) {
	for _, addr := range probeIPs {
		t.Run(addr.String(), func(t *testing.T) {
			l := newLink(t)
			l.lanHolds(t, addr)
			want := l.lanMAC(t)
			q, err := newQuestion(l.uplink, addr, netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			var got net.HardwareAddr
			// The namespace runs f on a goroutine of its own: f returns
			// its failures rather than ending the test there.
			l.inNode(t, func() error {
				c, err := Sockets{}.probe(l.uplink, q.proto, q.filter)
				if err != nil {
					return err
				}
				defer c.Close()
				if err := c.WriteFrame(q.frames[0]); err != nil {
					return err
				}
				// The answer comes within a millisecond, later on a loaded
				// machine: wait until the kernel has queued it, then let
				// the deadline pass unread.
				if err := waitQueued(c); err != nil {
					return err
				}
				c.SetReadDeadline(time.Now().Add(-time.Second))
				buf := make([]byte, 9216)
				if _, err := c.ReadFrame(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
					return fmt.Errorf("a read past the deadline = %v; want the timeout this test is about", err)
				}
				a, err := q.late(c, buf, nil)
				got = a.hardware()
				return err
			})
			if !bytes.Equal(got, want) {
				t.Errorf("late(%s) = %v; want the queued answer of %s", addr, got, want)
			}
		})
	}
}

// waitQueued waits until c's socket holds a received frame.
func waitQueued(c Conn) error {
	qc, ok := c.(queuer)
	if !ok {
		return fmt.Errorf("%T cannot tell what its socket queued", c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		waiting, err := qc.Queued()
		if err != nil || waiting {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("no answer queued within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The address a probe asks from is the uplink's own, chosen as the node
// would for the IP, whatever other interfaces carry; none while the uplink
// has no IPv4 address.
func TestTheProbeAsksFromTheUplinksOwnIPv4Address(t *testing.T) {
	l := newLink(t)
	var none netip.Addr
	l.inNode(t, func() (err error) { none, err = uplinkIPv4(l.uplink, testIP4); return err })
	if none.IsValid() {
		t.Errorf("an uplink with no IPv4 address asks from %s", none)
	}
	ip(t, "-n", l.nodeName, "addr", "add", "10.9.0.1/8", "dev", nodeIf)
	ip(t, "-n", l.nodeName, "addr", "add", "198.51.100.1/24", "dev", nodeIf)
	ip(t, "-n", l.nodeName, "addr", "add", "198.51.100.9/24", "dev", nodeIf) // secondary
	for i := range 50 {
		ip(t, "-n", l.nodeName, "addr", "add", fmt.Sprintf("198.51.100.%d/32", 100+i), "dev", "lo") // as a holder's
	}
	for _, tc := range []struct{ ip, want string }{{"198.51.100.7", "198.51.100.1"}, {"192.0.2.7", "10.9.0.1"}} {
		var got netip.Addr
		l.inNode(t, func() (err error) { got, err = uplinkIPv4(l.uplink, netip.MustParseAddr(tc.ip)); return err })
		if got.String() != tc.want {
			t.Errorf("asking for %s from %s, want %s", tc.ip, got, tc.want)
		}
	}
}
