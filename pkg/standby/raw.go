package standby

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/announce"
)

// RawPorts is the host's Ports: packet sockets on the uplinks, and their
// state as /sys/class/net shows it.
type RawPorts struct{}

var _ Ports = RawPorts{}

// Up reads the uplink's operstate: "up", or "unknown" for a device that
// has no carrier to tell (a dummy); anything else, or no device, is down.
func (RawPorts) Up(uplink string) bool {
	b, err := os.ReadFile("/sys/class/net/" + uplink + "/operstate")
	s := strings.TrimSpace(string(b))
	return err == nil && (s == "up" || s == "unknown")
}

// Open opens two packet sockets on the uplink, one for ARP and one for
// ICMPv6 neighbour discovery, each filtered in the kernel to frames of its
// kind that the uplink's own LAN sent to this node (announce.Incoming: a
// host of another VLAN answering for the IP must not look like the
// active), and reads what the checks ask from.
func (RawPorts) Open(uplink string) (Conn, From, error) {
	up, f, err := from(uplink)
	if err != nil {
		return nil, From{}, err
	}
	c := &rawConn{frames: make(chan []byte, 64), done: make(chan struct{})}
	ifi := &net.Interface{Index: up.Index, Name: up.Name, HardwareAddr: up.MAC}
	for _, s := range []struct {
		proto  int
		filter []bpf.Instruction
	}{{unix.ETH_P_ARP, announce.Incoming(up, nil)}, {unix.ETH_P_IPV6, announce.Incoming(up, announce.ICMPv6Types(135, 136))}} {
		raw, err := bpf.Assemble(s.filter)
		if err != nil {
			c.Close()
			return nil, From{}, err
		}
		pc, err := packet.Listen(ifi, packet.Raw, s.proto, &packet.Config{Filter: raw})
		if err != nil {
			c.Close()
			return nil, From{}, fmt.Errorf("opening a packet socket on %s: %w", uplink, err)
		}
		c.socks = append(c.socks, pc)
		go c.read(pc)
	}
	return c, f, nil
}

func (RawPorts) From(uplink string) (From, error) {
	_, f, err := from(uplink)
	return f, err
}

// from looks the uplink up and reads its MAC and addresses.
func from(uplink string) (announce.Uplink, From, error) {
	up, err := announce.LookUplink(uplink)
	if err != nil {
		return up, From{}, err
	}
	f := From{MAC: up.MAC}
	if f.V4, err = announce.AskFrom(up, netip.Addr{}); err != nil {
		return up, From{}, err
	}
	f.Local = linkLocal(up.Index)
	return up, f, nil
}

// linkLocal is the first IPv6 link-local address of the interface, the
// zero Addr when it has none (its IPv6 checks then cannot be sent).
func linkLocal(index int) netip.Addr {
	ifi, err := net.InterfaceByIndex(index)
	if err != nil {
		return netip.Addr{}
	}
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	return netip.Addr{}
}

// rawConn is the two sockets of an uplink as one Conn.
type rawConn struct {
	socks  []*packet.Conn // ARP, then IPv6
	frames chan []byte
	done   chan struct{}
}

var errClosed = errors.New("closed")

func (c *rawConn) read(pc *packet.Conn) {
	buf := make([]byte, 9216)
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			c.Close() // the uplink went away: the watch opens it again
			return
		}
		select {
		case c.frames <- append([]byte(nil), buf[:n]...):
		case <-c.done:
			return
		}
	}
}

func (c *rawConn) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-c.frames:
		return copy(b, f), nil
	case <-c.done:
		return 0, errClosed
	}
}

// WriteFrame sends f on the socket of its EtherType.
func (c *rawConn) WriteFrame(f []byte) error {
	if len(f) < 14 || len(c.socks) < 2 {
		return errors.New("frame too short, or the uplink's sockets are not open")
	}
	s := c.socks[0]
	if binary.BigEndian.Uint16(f[12:14]) == unix.ETH_P_IPV6 {
		s = c.socks[1]
	}
	_, err := s.WriteTo(f, &packet.Addr{HardwareAddr: net.HardwareAddr(f[0:6])})
	return err
}

func (c *rawConn) Close() error {
	select {
	case <-c.done:
		return nil
	default:
		close(c.done)
	}
	var errs []error
	for _, s := range c.socks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
