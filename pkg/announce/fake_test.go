package announce

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/bpf"
)

// fakeConn stands for a socket: it records what is written, hands out the
// frames queued in toRead, then reports the deadline.
type fakeConn struct {
	kind     string
	mu       sync.Mutex
	written  [][]byte
	toRead   [][]byte
	writeErr error
	deadline time.Time
	closed   bool
	onClose  func()
	// file is what a packetConn's File duplicates.
	file *os.File
}

func (c *fakeConn) WriteFrame(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writeErr != nil {
		return c.writeErr
	}
	c.written = append(c.written, append([]byte(nil), b...))
	return nil
}

func (c *fakeConn) ReadFrame(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.toRead) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(b, c.toRead[0])
	c.toRead = c.toRead[1:]
	return n, nil
}

func (c *fakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return nil
}

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("closed twice")
	}
	c.closed = true
	if c.onClose != nil {
		c.onClose()
	}
	return nil
}

func (c *fakeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fakeNet opens fakeConns and remembers each, by kind: "arp", "na", "probe".
type fakeNet struct {
	t     *testing.T
	mu    sync.Mutex
	conns []*fakeConn
	// answers are queued on every probe socket opened.
	answers [][]byte
	// fail makes opening a socket of that kind fail.
	fail map[string]error
	// from is the uplink's IPv4 address, for the probes' requests.
	from netip.Addr
}

func newFakeNet(t *testing.T) *fakeNet { return &fakeNet{t: t, fail: map[string]error{}} }

func (n *fakeNet) sockets() Sockets {
	return Sockets{
		ARP:   func(Uplink) (Conn, error) { return n.open("arp", true) },
		NA:    func(Uplink) (Conn, error) { return n.open("na", false) },
		Probe: func(Uplink, int, []bpf.Instruction) (Conn, error) { return n.open("probe", true) },
		// An uplink with no IPv4 address: the probe is the RFC 5227 one
		// alone, unless a test gives it one.
		AskFrom: func(Uplink, netip.Addr) (netip.Addr, error) { return n.from, nil },
	}
}

// open returns a fakeConn; one that a real socket would let a child inherit
// (AF_PACKET) carries a file to hand over: a pipe end, closed at test end.
func (n *fakeNet) open(kind string, packet bool) (Conn, error) {
	if err := n.fail[kind]; err != nil {
		return nil, err
	}
	c := &fakeConn{kind: kind}
	if kind == "probe" {
		c.toRead = append(c.toRead, n.answers...)
	}
	if packet {
		r, w, err := os.Pipe()
		if err != nil {
			n.t.Fatal(err)
		}
		n.t.Cleanup(func() { r.Close(); w.Close() })
		c.file = r
	}
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	if c.file == nil {
		return c, nil // as the ICMPv6 socket, whose close is fast
	}
	return packetConn{c}, nil
}

// packetConn is a fakeConn that can be handed over, as an AF_PACKET socket.
type packetConn struct{ *fakeConn }

// File hands over a duplicate of the conn's file, as a real socket's is.
func (c packetConn) File() (*os.File, error) { return dupFile(c.file.Fd(), c.kind) }

func (n *fakeNet) of(kind string) []*fakeConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*fakeConn
	for _, c := range n.conns {
		if c.kind == kind {
			out = append(out, c)
		}
	}
	return out
}
