package announce

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/linger"
)

// Goodbye tells a standby node on t's LAN that this node has just taken
// t.Addr off its holder, so that it takes the IP over at once instead of
// after its checks go unanswered: the RFC 5227 section 2.1.1 ARP probe for
// the IP (IPv4), or the RFC 4862 duplicate address detection solicitation
// for it (IPv6), from the uplink's MAC. Neither teaches a neighbour
// anything (their sender is 0.0.0.0 or ::), and no host answers them now
// that nobody holds the IP; a standby that knows this MAC as the active
// holder's takes it as the goodbye. The socket, whose last close is slow,
// goes to keep; with keep nil it closes here (the node process, which
// outlives the close, sends goodbyes so).
func Goodbye(t Target, keep *linger.Keeper) error {
	frame, proto, err := goodbyeFrame(t)
	if err != nil {
		return fmt.Errorf("saying goodbye for %s on %s: %w", t.Addr, t.Uplink.Name, err)
	}
	c, err := openFrames(t.Uplink, proto)
	if err != nil {
		return fmt.Errorf("saying goodbye for %s on %s: %w", t.Addr, t.Uplink.Name, err)
	}
	defer c.Close()
	if err := c.WriteFrame(frame); err != nil {
		return fmt.Errorf("saying goodbye for %s on %s: %w", t.Addr, t.Uplink.Name, err)
	}
	if keep == nil {
		return nil
	}
	if f, err := c.File(); err == nil {
		keep.Keep(f, linger.Packet)
	}
	return nil
}

// goodbyeFrame is the frame Goodbye sends for t, and its EtherType.
func goodbyeFrame(t Target) ([]byte, uint16, error) {
	if t.Addr.Is4() {
		f, err := arpProbe(t.Uplink.MAC, t.Addr)
		return f, unix.ETH_P_ARP, err
	}
	f, err := dadSolicitation(t.Uplink.MAC, t.Addr)
	return f, unix.ETH_P_IPV6, err
}

// openFrames is openARP for whole Ethernet frames of any EtherType.
func openFrames(up Uplink, proto uint16) (*rawConn, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: up.Index, Halen: 6}
	return &rawConn{fd: fd, to: to}, nil
}
