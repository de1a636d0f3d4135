package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ctnetlink's numbers (linux/netfilter/nfnetlink_conntrack.h), which
// x/sys/unix does not have.
const (
	subsysCtnetlink = 1
	msgCtGet        = 1
	msgCtDelete     = 2
	ctaTupleOrig    = 1
	ctaTupleReply   = 2
	ctaZone         = 18
	ctaTupleIP      = 1
	ctaIPv4Src      = 1
	ctaIPv4Dst      = 2
	ctaIPv6Src      = 3
	ctaIPv6Dst      = 4
)

// Conntrack deletes conntrack entries over its own ctnetlink socket, which,
// like the table's, its owner may hand to a process that outlives it (see
// Table.File): its last close waits the same way.
type Conntrack struct {
	c *netlink.Conn
}

// OpenConntrack connects to ctnetlink in the current network namespace.
func OpenConntrack() (*Conntrack, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to conntrack: %w", err)
	}
	return &Conntrack{c: c}, nil
}

// Close closes the socket.
func (ct *Conntrack) Close() error { return ct.c.Close() }

// File is a duplicate of the socket, as Table.File.
func (ct *Conntrack) File() (*os.File, error) { return dupConn(ct.c, "conntrack") }

// ForgetTarget deletes the entries of flows to ip that were DNATed to
// target (original destination ip, reply source target), so that a client
// whose flow went to a leaving holder starts a new flow, which the
// remaining holders get, instead of sending into the void.
func (ct *Conntrack) ForgetTarget(ip, target netip.Addr) (uint, error) {
	return ct.forget(ip, func(f flow) bool { return f.origDst == ip && f.replySrc == target })
}

// ForgetIP deletes every entry of ip: flows to it (original destination)
// and flows SNATed from it (reply destination), for an IP leaving the node.
func (ct *Conntrack) ForgetIP(ip netip.Addr) (uint, error) {
	return ct.forget(ip, func(f flow) bool { return f.origDst == ip || f.replyDst == ip })
}

// flow is what forget reads of one entry, and what deleting it takes.
type flow struct {
	origDst, replySrc, replyDst netip.Addr
	orig, zone                  []byte // the raw attributes, sent back to delete
}

func (ct *Conntrack) forget(ip netip.Addr, match func(flow) bool) (uint, error) {
	fam := byte(unix.AF_INET)
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	msgs, err := ct.c.Execute(ctMessage(msgCtGet, netlink.Dump, fam, nil))
	if err != nil {
		return 0, fmt.Errorf("listing conntrack entries of %s: %w", ip, err)
	}
	var n uint
	var errs []error
	for _, m := range msgs {
		f, ok := parseFlow(m.Data)
		if !ok || !match(f) {
			continue
		}
		ae := netlink.NewAttributeEncoder()
		ae.Bytes(unix.NLA_F_NESTED|ctaTupleOrig, f.orig)
		if f.zone != nil {
			ae.Bytes(ctaZone, f.zone)
		}
		attrs, err := ae.Encode()
		if err == nil {
			_, err = ct.c.Execute(ctMessage(msgCtDelete, netlink.Acknowledge, fam, attrs))
		}
		switch {
		case err == nil:
			n++
		case !errors.Is(err, syscall.ENOENT): // gone meanwhile is what we want
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("deleting conntrack entries of %s: %w", ip, err)
	}
	return n, nil
}

func ctMessage(msg uint16, flags netlink.HeaderFlags, fam byte, attrs []byte) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysCtnetlink<<8 | msg), Flags: netlink.Request | flags},
		Data:   append([]byte{fam, unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
}

// parseFlow reads an entry: its nfgenmsg header, then its attributes.
func parseFlow(data []byte) (flow, bool) {
	var f flow
	if len(data) < 4 {
		return f, false
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return f, false
	}
	for ad.Next() {
		switch ad.Type() {
		case ctaTupleOrig:
			f.orig = ad.Bytes()
			_, f.origDst = parseTuple(f.orig)
		case ctaTupleReply:
			f.replySrc, f.replyDst = parseTuple(ad.Bytes())
		case ctaZone:
			f.zone = ad.Bytes()
		}
	}
	return f, ad.Err() == nil && f.orig != nil
}

// parseTuple reads a tuple's source and destination addresses.
func parseTuple(b []byte) (src, dst netip.Addr) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return src, dst
	}
	for ad.Next() {
		if ad.Type() != ctaTupleIP {
			continue
		}
		ip, err := netlink.NewAttributeDecoder(ad.Bytes())
		if err != nil {
			return src, dst
		}
		for ip.Next() {
			a, _ := netip.AddrFromSlice(ip.Bytes())
			switch ip.Type() {
			case ctaIPv4Src, ctaIPv6Src:
				src = a
			case ctaIPv4Dst, ctaIPv6Dst:
				dst = a
			}
		}
	}
	return src, dst
}
