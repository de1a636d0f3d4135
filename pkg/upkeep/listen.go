package upkeep

import (
	"context"
	"net"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/announce"
)

// FrameConn is one receiving socket of an uplink, as arp.New takes a
// net.PacketConn: the conflict watch reads whole Ethernet frames from it,
// and a test gives it a fake. Close makes a blocked ReadFrame return.
type FrameConn interface {
	ReadFrame(b []byte) (int, error)
	Close() error
}

// ListenFunc opens the receiving sockets of an uplink.
type ListenFunc func(up announce.Uplink) ([]FrameConn, error)

// frame is one frame received on an uplink.
type frame struct {
	uplink string
	data   []byte
}

// listenRaw opens two packet sockets on the uplink: one for ARP and one
// for ICMPv6 neighbour advertisements, each with a filter that passes
// only what the uplink's own LAN sent to this node (announce.Incoming: not
// the node's own frames, nor another VLAN's) and, for IPv6, only NAs, so
// that the kernel hands us only what may be a claim.
func listenRaw(up announce.Uplink) ([]FrameConn, error) {
	ifi := &net.Interface{Index: up.Index, Name: up.Name, HardwareAddr: up.MAC}
	var conns []FrameConn
	for _, s := range []struct {
		proto  int
		filter []bpf.Instruction
	}{{unix.ETH_P_ARP, announce.Incoming(up, nil)}, {unix.ETH_P_IPV6, announce.Incoming(up, announce.ICMPv6Types(136, 136))}} {
		raw, err := bpf.Assemble(s.filter)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		c, err := packet.Listen(ifi, packet.Raw, s.proto, &packet.Config{Filter: raw})
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, packetConn{c})
	}
	return conns, nil
}

type packetConn struct{ c *packet.Conn }

func (p packetConn) ReadFrame(b []byte) (int, error) {
	n, _, err := p.c.ReadFrom(b)
	return n, err
}

func (p packetConn) Close() error { return p.c.Close() }

func closeAll(conns []FrameConn) {
	for _, c := range conns {
		c.Close()
	}
}

// readFrames sends each frame c receives to out until c fails (closed, or
// its interface gone: the next refresh opens the uplink again) or ctx ends.
func readFrames(ctx context.Context, c FrameConn, uplink string, out chan<- frame) {
	buf := make([]byte, 1600)
	for {
		n, err := c.ReadFrame(buf)
		if err != nil {
			return
		}
		select {
		case out <- frame{uplink, append([]byte(nil), buf[:n]...)}:
		case <-ctx.Done():
			return
		}
	}
}
