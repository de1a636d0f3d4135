package conntrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/external-ip/external-ip/pkg/linger"
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
	ctaStatus       = 3
	ctaZone         = 18
	ctaStatusMask   = 26
	ctaTupleIP      = 1
	ctaIPv4Src      = 1
	ctaIPv4Dst      = 2
	ctaIPv6Src      = 3
	ctaIPv6Dst      = 4
	ctaFilter       = 25

	ctaFilterOrigFlags  = 1
	ctaFilterReplyFlags = 2
	ctaFilterFlagIPSrc  = 1 << 0
	ctaFilterFlagIPDst  = 1 << 1

	// ipsSrcNAT and ipsDstNAT are IPS_SRC_NAT and IPS_DST_NAT of ct
	// status (linux/netfilter/nf_conntrack_common.h).
	ipsSrcNAT = 0x10
	ipsDstNAT = 0x20
)

// Conn deletes conntrack entries over its own ctnetlink socket, which,
// like package nat's table's, its owner may hand to a process that
// outlives it (see nat.Table.File): its last close waits the same way.
type Conn struct {
	c *netlink.Conn
	// entries counts the namespace's conntrack entries; tests replace it.
	entries func() (int, error)
	// dumps counts the dumps made, for tests.
	dumps int
	// pass keeps, from StartPass on, each dump made by its request, so
	// that an identical request is not walked again (nil: no pass).
	pass map[string][]flow
}

// StartPass begins a pass of clean-ups that were all queued before it:
// from now on one dump serves every identical request, until the next
// StartPass. An IPv6 dump is filtered by status alone (kernelFilters), so
// every target's request is the same, and K queued targets took K walks
// of the whole hash. It is safe because every clean-up of the pass was
// queued after its commit stopped steering to what left: a dump made
// after the pass began holds every entry of each of them, and one that a
// clean-up of the pass already deleted is gone when another finds it.
func (ct *Conn) StartPass() { ct.pass = map[string][]flow{} }

// Open connects to ctnetlink in the current network namespace.
func Open() (*Conn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to conntrack: %w", err)
	}
	return &Conn{c: c, entries: countEntries}, nil
}

// countEntries is the current network namespace's number of conntrack
// entries, which the kernel keeps exactly.
func countEntries() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Tracked says whether the current network namespace has any conntrack
// entry; without the conntrack module it has none.
func Tracked() (bool, error) {
	n, err := countEntries()
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return n > 0, err
}

// Close closes the socket.
func (ct *Conn) Close() error { return ct.c.Close() }

// File is a duplicate of the socket, as nat.Table.File.
func (ct *Conn) File() (*os.File, error) { return linger.Dup(ct.c, "conntrack") }

// ForgetTarget deletes the entries of flows to ip that were DNATed to
// target (original destination ip, reply source target, status DST_NAT),
// so that a client whose flow went to a leaving holder starts a new flow,
// which the remaining holders get, instead of sending into the void.
func (ct *Conn) ForgetTarget(ip, target netip.Addr) (uint, error) {
	if ip.Is4() != target.Is4() {
		return 0, nil // no entry has tuples of two families
	}
	return ct.forget(ip, flowFilter{origDst: ip, replySrc: target, status: ipsDstNAT})
}

// ForgetIP deletes the entries that our rules made for ip: flows DNATed
// from it (original destination) and flows SNATed to it (reply
// destination), for an IP leaving the node. The kernel's filter ANDs what
// it compares, so the OR takes two filters.
func (ct *Conn) ForgetIP(ip netip.Addr) (uint, error) {
	return ct.forget(ip, flowFilter{origDst: ip, status: ipsDstNAT}, flowFilter{replyDst: ip, status: ipsSrcNAT})
}

// flow is what forget reads of one entry, and what deleting it takes.
type flow struct {
	origDst, replySrc, replyDst netip.Addr
	status                      uint32
	orig, zone                  []byte // the raw attributes, sent back to delete
}

// flowFilter picks entries by address and NAT status; an invalid address
// or a zero status matches any. The kernel applies the status to a dump of
// either family (CTA_STATUS, Linux 6.1) and the addresses to an IPv4 one
// (CTA_FILTER, Linux 5.8), so that the clean-up costs the entries our
// rules NATed, not every connection on the node: the kernel still walks
// its whole hash, but copies and we parse only what matches.
type flowFilter struct {
	origDst, replySrc, replyDst netip.Addr
	status                      uint32
}

// match repeats the kernel's test: a kernel older than 5.8 ignores the
// filter and dumps the whole family, which must not make us delete it.
func (ff flowFilter) match(f flow) bool {
	return (!ff.origDst.IsValid() || f.origDst == ff.origDst) &&
		(!ff.replySrc.IsValid() || f.replySrc == ff.replySrc) &&
		(!ff.replyDst.IsValid() || f.replyDst == ff.replyDst) &&
		f.status&ff.status == ff.status
}

func (ct *Conn) forget(ip netip.Addr, filters ...flowFilter) (uint, error) {
	fam := ctFamily(ip)
	flows, err := ct.matching(fam, filters)
	if err != nil {
		return 0, fmt.Errorf("listing conntrack entries of %s: %w", ip, err)
	}
	var n uint
	var errs []error
	for _, f := range flows {
		switch err := ct.delete(fam, f); {
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

// smallTable is the most entries for which one dump of the whole family
// beats one dump per filter: each dump walks every bucket of the kernel's
// conntrack hash, whatever it returns, and each entry it returns costs
// its sending and parsing: measured, one more walk was worth about 200
// entries (figures: docs/performance.md, "Figures behind design choices").
const smallTable = 128

// matching returns the entries any of filters picks, each once (an entry
// both to and from an IP is in two dumps). With no entry in the namespace
// it dumps nothing: the count is read after the table stopped steering to
// what leaves, so every entry of a leaving flow is in it.
func (ct *Conn) matching(fam byte, filters []flowFilter) ([]flow, error) {
	n, err := ct.entries()
	if err == nil && n == 0 {
		return nil, nil
	}
	dumps := filters
	if err == nil && n <= smallTable {
		dumps = []flowFilter{{}} // the whole family, once
	}
	seen := map[string]bool{}
	var picked []flow
	for _, d := range dumps {
		flows, err := ct.dump(fam, d)
		if err != nil {
			return nil, err
		}
		for _, f := range flows {
			key := string(f.orig) + string(f.zone)
			if !seen[key] && slices.ContainsFunc(filters, func(ff flowFilter) bool { return ff.match(f) }) {
				seen[key] = true
				picked = append(picked, f)
			}
		}
	}
	return picked, nil
}

// kernelFilters says whether the kernel's address filter can be trusted.
// For IPv6 it is inverted (ctnetlink_filter_match_tuple skips an entry
// when !ipv6_addr_cmp, that is when the addresses are equal; 5.8 to at
// least 6.18: a filter for one address returned every entry but that
// address's), so an IPv6 dump is filtered by status alone and the
// addresses are matched here.
func kernelFilters(fam byte) bool { return fam == unix.AF_INET }

// dump returns the entries the kernel picks by ff, unchecked, so that a
// test can tell the kernel's filtering from forget's.
func (ct *Conn) dump(fam byte, ff flowFilter) ([]flow, error) {
	attrs, err := ff.encode(fam)
	if err != nil {
		return nil, err
	}
	key := string(append([]byte{fam}, attrs...))
	if flows, ok := ct.pass[key]; ok {
		return flows, nil
	}
	ct.dumps++
	msgs, err := ct.c.Execute(ctMessage(msgCtGet, netlink.Dump, fam, attrs))
	if err != nil {
		return nil, err
	}
	flows := make([]flow, 0, len(msgs))
	for _, m := range msgs {
		if f, ok := parseFlow(m.Data); ok {
			flows = append(flows, f)
		}
	}
	if ct.pass != nil {
		ct.pass[key] = flows
	}
	return flows, nil
}

// delete names the entry by its exact original tuple and zone, so that it
// deletes that entry and no other.
func (ct *Conn) delete(fam byte, f flow) error {
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.NLA_F_NESTED|ctaTupleOrig, f.orig)
	if f.zone != nil {
		ae.Bytes(ctaZone, f.zone)
	}
	attrs, err := ae.Encode()
	if err == nil {
		_, err = ct.c.Execute(ctMessage(msgCtDelete, netlink.Acknowledge, fam, attrs))
	}
	return err
}

// encode writes ff as ctnetlink_alloc_filter reads it: the addresses in
// the tuples, and in CTA_FILTER which of them to compare (IPv4 only, see
// kernelFilters); the status and its mask, both big-endian. The kernel
// needs NLA_F_NESTED on CTA_FILTER (a strict parse) and reads its flags in
// host order, as every nla u32 (unlike the addresses, in network order).
// A kernel older than 6.1 ignores the status (a lenient parse).
func (ff flowFilter) encode(fam byte) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	if kernelFilters(fam) && (ff.origDst.IsValid() || ff.replySrc.IsValid() || ff.replyDst.IsValid()) {
		origFlags := tupleFilter(ae, ctaTupleOrig, netip.Addr{}, ff.origDst)
		replyFlags := tupleFilter(ae, ctaTupleReply, ff.replySrc, ff.replyDst)
		ae.Nested(ctaFilter, func(fe *netlink.AttributeEncoder) error {
			fe.Uint32(ctaFilterOrigFlags, origFlags)
			fe.Uint32(ctaFilterReplyFlags, replyFlags)
			return nil
		})
	}
	if ff.status != 0 {
		ae.Bytes(ctaStatus, binary.BigEndian.AppendUint32(nil, ff.status))
		ae.Bytes(ctaStatusMask, binary.BigEndian.AppendUint32(nil, ff.status))
	}
	return ae.Encode()
}

// tupleFilter adds a tuple of the valid ones of src and dst (none: no
// tuple) and returns the flags that have the kernel compare them.
func tupleFilter(ae *netlink.AttributeEncoder, typ uint16, src, dst netip.Addr) uint32 {
	var flags uint32
	if src.IsValid() {
		flags |= ctaFilterFlagIPSrc
	}
	if dst.IsValid() {
		flags |= ctaFilterFlagIPDst
	}
	if flags == 0 {
		return 0
	}
	ae.Nested(typ, func(te *netlink.AttributeEncoder) error {
		te.Nested(ctaTupleIP, func(ie *netlink.AttributeEncoder) error {
			if src.IsValid() {
				ie.Bytes(ipAttr(src, ctaIPv4Src, ctaIPv6Src), src.AsSlice())
			}
			if dst.IsValid() {
				ie.Bytes(ipAttr(dst, ctaIPv4Dst, ctaIPv6Dst), dst.AsSlice())
			}
			return nil
		})
		return nil
	})
	return flags
}

func ipAttr(a netip.Addr, v4, v6 uint16) uint16 {
	if a.Is4() {
		return v4
	}
	return v6
}

func ctFamily(ip netip.Addr) byte {
	if ip.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
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
		case ctaStatus:
			if b := ad.Bytes(); len(b) == 4 {
				f.status = binary.BigEndian.Uint32(b)
			}
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
