package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Uplink is the interface announcements go out on, in the network namespace
// of the thread that opens the sockets.
type Uplink struct {
	Name   string
	Index  int
	MAC    net.HardwareAddr
	Router bool // IPv6 forwarding is on for this interface: sets the NA Router flag
}

// Sender sends announcement rounds on one uplink. It is not safe for
// concurrent use.
type Sender struct {
	up   Uplink
	open Sockets
	arp  Conn // opened on the first IPv4 address; nil until then
	na   Conn // opened on the first IPv6 address; nil until then
}

// NewSender returns a Sender for up on raw sockets.
func NewSender(up Uplink) *Sender { return NewSenderOn(up, Sockets{}) }

// NewSenderOn returns a Sender for up that opens its Conns with open. It
// opens nothing yet: a round opens only the sockets its addresses need, so
// an IPv4-only node never needs IPv6 and the reverse.
func NewSenderOn(up Uplink, open Sockets) *Sender {
	return &Sender{up: up, open: open}
}

// Round sends one announcement round: both gratuitous ARP frames for each
// IPv4 address and one unsolicited neighbour advertisement for each IPv6
// address. A failure stops that family's part of the round, since the rest
// would fail the same way, but not the other family's; both are returned.
func (s *Sender) Round(ips []netip.Addr) error {
	var v4, v6 []netip.Addr
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return errors.Join(s.roundARP(v4), s.roundNA(v6))
}

// Close closes the sockets opened so far.
func (s *Sender) Close() error {
	var errs []error
	for _, c := range []*Conn{&s.arp, &s.na} {
		if *c != nil {
			errs = append(errs, (*c).Close())
			*c = nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing announcement sockets on %s: %w", s.up.Name, err)
	}
	return nil
}

// Release hands the slow-to-close sockets opened so far to the caller as
// files, for a linger.Keeper, and closes the Sender's own.
//
// Why: Linux waits for an RCU grace period (synchronize_net) when the last
// reference to an AF_PACKET socket goes (figure: docs/performance.md,
// "Figures behind design choices"). Closed by the
// plugin, that wait would sit on every IPv4 ADD; released after the plugin
// has exited, it costs the ADD nothing.
func (s *Sender) Release() ([]*os.File, error) {
	var files []*os.File
	if h, ok := s.arp.(handover); ok {
		f, err := h.File()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("handing over the ARP socket on %s: %w", s.up.Name, err)
		}
		files = append(files, f)
	}
	return files, s.Close()
}

func (s *Sender) roundARP(ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	if s.arp == nil {
		c, err := s.open.arp(s.up)
		if err != nil {
			return fmt.Errorf("opening ARP socket on %s: %w", s.up.Name, err)
		}
		s.arp = c
	}
	for _, ip := range ips {
		frames, err := GratuitousARP(s.up.MAC, ip)
		if err != nil {
			return err
		}
		for _, f := range frames {
			if err := s.arp.WriteFrame(f); err != nil {
				return fmt.Errorf("sending gratuitous ARP for %s on %s: %w", ip, s.up.Name, err)
			}
		}
	}
	return nil
}

func (s *Sender) roundNA(ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	if s.na == nil {
		c, err := s.open.na(s.up)
		if err != nil {
			return fmt.Errorf("opening ICMPv6 socket on %s: %w", s.up.Name, err)
		}
		s.na = c
	}
	for _, ip := range ips {
		msg, err := UnsolicitedNA(s.up.MAC, ip, s.up.Router)
		if err != nil {
			return err
		}
		if err := s.na.WriteFrame(msg); err != nil {
			if errors.Is(err, unix.EADDRNOTAVAIL) {
				// The kernel found no source: the uplink's link-local
				// address is missing, or still tentative during DAD.
				err = fmt.Errorf("no usable IPv6 link-local address: %w", err)
			}
			return fmt.Errorf("sending neighbour advertisement for %s on %s: %w", ip, s.up.Name, err)
		}
	}
	return nil
}
