package standby

import (
	"context"
	"net"
	"sync/atomic"
)

// Conn is one uplink's socket for the watch, as arp.New takes a
// net.PacketConn: whole Ethernet frames out and in (ARP and neighbour
// discovery, never the node's own), so that a test gives it a fake. Close
// makes a blocked ReadFrame return.
type Conn interface {
	WriteFrame(b []byte) error
	ReadFrame(b []byte) (int, error)
	Close() error
}

// Ports is the node's side of the LAN (rawPorts is the host's).
type Ports interface {
	// Open opens uplink's Conn and says what checks ask from there.
	Open(uplink string) (Conn, From, error)
	// From reads again what checks ask from on uplink: an address it
	// lacked at Open (a link-local added with the carrier, an IPv4
	// address from DHCP) comes later.
	From(uplink string) (From, error)
	// Up says whether uplink is up and has its carrier.
	Up(uplink string) bool
}

// port is one open uplink.
type port struct {
	conn    Conn
	from    From
	stopped atomic.Bool // its reader stopped
}

// frameOn is one frame an uplink received.
type frameOn struct {
	uplink string
	data   []byte
}

// follow opens a port on every uplink of the watched IPs and closes the
// others, and those whose reader stopped (their interface went away: the
// next read opens it again).
func (w *Watcher) follow(ctx context.Context) {
	need := map[string]bool{}
	for _, x := range w.ips {
		need[x.Uplink] = true
	}
	for name, p := range w.ports {
		if !need[name] || p.stopped.Load() {
			p.conn.Close() // its reader stops at its next frame, or now
			delete(w.ports, name)
		}
	}
	for name := range need {
		if p := w.ports[name]; p != nil {
			w.complete(name, p)
			continue
		}
		c, f, err := w.Ports.Open(name)
		if err != nil {
			w.Log.Error("opening the uplink for the standby watch failed", "uplink", name, "error", err)
			continue
		}
		p := &port{conn: c, from: f}
		w.ports[name] = p
		go w.readFrames(ctx, name, p)
	}
}

// complete reads p's From again while it lacks an address to check from.
func (w *Watcher) complete(name string, p *port) {
	if p.from.V4.IsValid() && p.from.Local.IsValid() {
		return
	}
	if f, err := w.Ports.From(name); err == nil {
		p.from = f
	}
}

func (w *Watcher) readFrames(ctx context.Context, name string, p *port) {
	defer p.stopped.Store(true)
	buf := make([]byte, 9216)
	for {
		n, err := p.conn.ReadFrame(buf)
		if err != nil {
			return
		}
		select {
		case w.frames <- frameOn{name, append([]byte(nil), buf[:n]...)}:
		case <-ctx.Done():
			return
		}
	}
}

func (w *Watcher) closePorts() {
	for name, p := range w.ports {
		p.conn.Close()
		delete(w.ports, name)
	}
}

// ours says whether mac is one of the node's uplinks'.
func (w *Watcher) ours(mac net.HardwareAddr) bool {
	for _, p := range w.ports {
		if p.from.MAC.String() == mac.String() {
			return true
		}
	}
	return false
}
