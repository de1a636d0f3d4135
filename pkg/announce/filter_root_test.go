package announce

import (
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// tagged inserts an 802.1Q tag of VLAN vid after the Ethernet addresses.
func tagged(f []byte, vid uint16) []byte {
	out := append([]byte(nil), f[:12]...)
	out = append(out, 0x81, 0x00, byte(vid>>8), byte(vid))
	return append(out, f[12:]...)
}

// lanSender is a packet socket on the LAN end, for frames the tests build
// whole; it is closed when t ends.
func (l *link) lanSender(t *testing.T, proto int) *packet.Conn {
	t.Helper()
	var c *packet.Conn
	if err := l.lan.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(lanIf)
		if err == nil {
			c, err = packet.Listen(ifi, packet.Raw, proto, nil)
		}
		return err
	}); err != nil {
		t.Fatalf("opening a packet socket on %s: %v", lanIf, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// incomingPasses sends frame, an ARP frame about testIP4, from the LAN end
// and says whether a socket on the uplink filtered by Incoming received
// it. A second socket on the uplink, filtered only by the frame's content,
// must receive it, or the frame never reached the uplink's sockets and
// the answer would prove nothing.
func (l *link) incomingPasses(t *testing.T, frame []byte) bool {
	t.Helper()
	lc := l.lanSender(t, unix.ETH_P_ARP)
	passed := false
	l.inNode(t, func() error {
		var conns [2]Conn
		for i, filter := range [][]bpf.Instruction{arpAbout(testIP4), Incoming(l.uplink, arpAbout(testIP4))} {
			c, err := openProbe(l.uplink, unix.ETH_P_ARP, filter)
			if err != nil {
				return err
			}
			defer c.Close()
			conns[i] = c
		}
		if _, err := lc.WriteTo(frame, &packet.Addr{HardwareAddr: frame[:6]}); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		conns[0].SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := conns[0].ReadFrame(buf); err != nil {
			t.Fatalf("the uplink's unfiltered socket did not receive the frame: %v", err)
		}
		// Both sockets get the frame in one pass of the kernel's receive
		// path: a short wait is enough for the second.
		conns[1].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := conns[1].ReadFrame(buf)
		passed = err == nil
		return nil
	})
	return passed
}

// TestIncomingDropsFramesOfAnotherVLAN: the node process's listeners
// (conflict watch, standby checks) filter with Incoming. A host on VLAN
// 200 of a trunk uplink (no VLAN device for 200 on the node, so the
// kernel hands the frame on untagged, as for another host) that uses a
// held IP must not look like another host claiming it on the uplink's own
// LAN.
func TestIncomingDropsFramesOfAnotherVLAN(t *testing.T) {
	l := newLink(t)
	fs, err := GratuitousARP(l.lanMAC(t), testIP4)
	if err != nil {
		t.Fatal(err)
	}
	if l.incomingPasses(t, tagged(fs[1], 200)) {
		t.Errorf("a listener filtered by Incoming received an ARP frame of VLAN 200 on the untagged uplink")
	}
}

// TestIncomingDropsFramesADeviceStackedOnTheUplinkTakes: a VLAN device on
// the uplink takes its VLAN's frames, yet the kernel also delivers them to
// the uplink's sockets. This kernel has no VLAN driver; a macvlan takes
// the frames sent to its address by the same path (the frame's device
// becomes the upper one), so it stands in for it here. The frame in each
// case is no frame of the uplink's own LAN to this node.
func TestIncomingDropsFramesADeviceStackedOnTheUplinkTakes(t *testing.T) {
	l := newLink(t)
	ip(t, "-n", l.nodeName, "link", "add", "name", "mv0", "link", nodeIf, "type", "macvlan", "mode", "bridge")
	ip(t, "-n", l.nodeName, "link", "set", "mv0", "up")
	var upper net.HardwareAddr
	l.inNode(t, func() error {
		ifi, err := net.InterfaceByName("mv0")
		if err == nil {
			upper = ifi.HardwareAddr
		}
		return err
	})
	fs, err := GratuitousARP(l.lanMAC(t), testIP4)
	if err != nil {
		t.Fatal(err)
	}
	// The gratuitous reply, sent to the upper device alone.
	f := append(append([]byte(nil), upper...), fs[1][6:]...)
	if l.incomingPasses(t, f) {
		t.Errorf("a listener filtered by Incoming received an ARP frame sent to %s, a device stacked on the uplink", upper)
	}
}
