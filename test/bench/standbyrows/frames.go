package standbyrows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// tally is the frames about one IP that the nodes put on the LAN: by
// sender (0: the active node, 1: the standby), and those sent to every
// host (broadcast, multicast), which is what an ARP storm is made of.
type tally struct {
	from      [2]int
	broadcast int
}

// checkTraffic prints the check traffic while nothing fails: a pair with
// both families' IPs held, both node processes watching, the frames about
// each IP counted on the LAN for `counted`.
func (r *Rows) checkTraffic() error {
	p, err := r.newPair()
	if p != nil {
		defer p.drop()
	}
	if err != nil {
		return err
	}
	ips := []netip.Addr{held[false], held[true]}
	if err := r.hold(p, ips...); err != nil {
		return err
	}
	for i := range p.nodes {
		if err := r.watch(p, i, ips...); err != nil {
			return err
		}
	}
	time.Sleep(3 * every) // past the first checks, broadcast
	r.b.Logf("counting the frames about %v on the LAN for %v", ips, counted)
	counts, err := countFrames(p.lan, ips, counted)
	if err != nil {
		return fmt.Errorf("counting the check traffic: %w", err)
	}
	r.b.Print(trafficTable(ips, counts, counted))
	return nil
}

// countFrames counts, for window, the frames about each of ips that
// arrive on the LAN bridge's ports node1 and node2: each frame a node
// sends is counted once, where it enters the LAN, whether the bridge
// forwards it to one port (unicast) or floods it.
func countFrames(lan string, ips []netip.Addr, window time.Duration) (tallies, error) {
	var fd int
	var ports [2]int
	err := ns.WithNetNSPath("/var/run/netns/"+lan, func(ns.NetNS) error {
		for i := range ports {
			ifi, err := net.InterfaceByName(fmt.Sprintf("node%d", i+1))
			if err != nil {
				return err
			}
			ports[i] = ifi.Index
		}
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		return err
	})
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	counts := tallies{}
	for _, ip := range ips {
		counts[ip] = &tally{}
	}
	buf := make([]byte, 9216)
	for end := time.Now().Add(window); time.Now().Before(end); {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok {
			counts.count(buf[:n], slices.Index(ports[:], ll.Ifindex), ll.Pkttype)
		}
	}
	return counts, nil
}

// tallies are the frames about each IP counted.
type tallies map[netip.Addr]*tally

// count counts frame f, received on the port of node port (-1: not a
// node's port) as kind: a frame a port sends (PACKET_OUTGOING) is one
// that entered the LAN elsewhere.
func (ts tallies) count(f []byte, port int, kind uint8) {
	ip, ok := aboutIP(f)
	t := ts[ip]
	if !ok || t == nil || port < 0 || kind == unix.PACKET_OUTGOING {
		return
	}
	t.from[port]++
	if kind == unix.PACKET_BROADCAST || kind == unix.PACKET_MULTICAST {
		t.broadcast++
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// aboutIP is the IP a frame asks or answers about: an ARP request's target
// (a check, a probe, a gratuitous ARP), an ARP reply's sender; a neighbour
// solicitation's or advertisement's target. False for any other frame.
func aboutIP(f []byte) (netip.Addr, bool) {
	const eth, arpOp, arpSPA, arpTPA, ip6Next, icmpType, ndTarget = 14, 20, 28, 38, 20, 54, 62
	if len(f) < eth {
		return netip.Addr{}, false
	}
	switch binary.BigEndian.Uint16(f[12:eth]) {
	case unix.ETH_P_ARP:
		if len(f) < arpTPA+4 {
			return netip.Addr{}, false
		}
		at := arpTPA
		if binary.BigEndian.Uint16(f[arpOp:]) == 2 {
			at = arpSPA
		}
		return netip.AddrFrom4([4]byte(f[at : at+4])), true
	case unix.ETH_P_IPV6:
		if len(f) < ndTarget+16 || f[ip6Next] != unix.IPPROTO_ICMPV6 || (f[icmpType] != 135 && f[icmpType] != 136) {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16([16]byte(f[ndTarget : ndTarget+16])), true
	}
	return netip.Addr{}, false
}

// trafficTable states, per IP, the frames per second about it on the LAN,
// by sender, and how many of them every host received.
func trafficTable(ips []netip.Addr, counts tallies, window time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| check traffic while nothing fails: frames per second about the IP on the LAN (one active node, one standby, --standby-every %v; counted %v) | all | from the standby | from the active | broadcast or multicast | goal |\n", every, window)
	sb.WriteString("|---|---:|---:|---:|---:|---|\n")
	per := func(n int) string { return fmt.Sprintf("%.1f", float64(n)/window.Seconds()) }
	for _, ip := range ips {
		t := counts[ip]
		fmt.Fprintf(&sb, "| %s %s | %s | %s | %s | %s | no ARP storm: unicast checks and answers, no broadcast |\n",
			family(ip.Is6()), ip, per(t.from[0]+t.from[1]), per(t.from[1]), per(t.from[0]), per(t.broadcast))
	}
	return sb.String()
}
