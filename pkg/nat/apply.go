package nat

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// EgressKey names one egress rule: flows from Source leaving through Uplink.
type EgressKey struct {
	Source netip.Addr
	Uplink string
}

// SetIngress makes new flows to ip go to targets, spread in turn over them
// in the order given; no targets removes ip's steering. It makes the
// change in one transaction, and is idempotent: what it deletes it has
// just added or found there, so a replay finds whatever it needs.
func (t *Table) SetIngress(ip netip.Addr, targets []netip.Addr) error {
	for _, a := range targets {
		if a.Is4() != ip.Is4() {
			return fmt.Errorf("steering %s to %s: families differ", ip, a)
		}
	}
	err := t.flush(func() error { return t.buildIngress(ip, targets) })
	if err != nil {
		return fmt.Errorf("steering %s to %v in table inet %s: %w", ip, targets, TableName, err)
	}
	return nil
}

// buildIngress stages ip's steering in place of what it has now: one
// target is ip's element of dnat4; several, a chain of ip's own (in4's
// element goes to it) that spreads new flows over a map of its own.
func (t *Table) buildIngress(ip netip.Addr, targets []netip.Addr) error {
	f := familyOf(ip)
	old, had, err := t.c.GetElement(f.direct, ip.AsSlice())
	if err != nil {
		return err
	}
	// An IP with a dnat4 element has no chain: every transaction that
	// gives it one takes the other away. Then nothing is staged to drop a
	// chain and map (six messages, a set made and destroyed) that are
	// not there: the common DEL, of an IP with one holder.
	noSpread := had
	direct := t.set(f.direct)
	el := []nftables.SetElement{{Key: ip.AsSlice(), Val: old}}
	if had && (len(targets) != 1 || !bytes.Equal(old, targets[0].AsSlice())) {
		if err := t.c.SetDeleteElements(direct, el); err != nil {
			return err
		}
		had = false
	}
	if len(targets) > 0 {
		// Rebuilt by anything but a fresh ADD (a repair, a second holder):
		// flows of before may exist that no rule recorded (seeAll).
		if err := t.stageSeen([]netip.Addr{ip}, false); err != nil {
			return err
		}
	}
	if len(targets) > 1 {
		return t.buildSpread(ip, targets)
	}
	if !noSpread {
		if err := t.dropSpread(ip); err != nil {
			return err
		}
	}
	ext := []nftables.SetElement{{Key: ip.AsSlice()}}
	if err := t.c.SetAddElements(t.set(f.ext), ext); err != nil {
		return err
	}
	if len(targets) == 0 {
		return t.c.SetDeleteElements(t.set(f.ext), ext)
	}
	if had {
		return nil
	}
	return t.c.SetAddElements(direct, []nftables.SetElement{{Key: ip.AsSlice(), Val: targets[0].AsSlice()}})
}

// buildSpread rewrites ip's chain and spread map, made if missing, and
// points in4's element at the chain.
func (t *Table) buildSpread(ip netip.Addr, targets []netip.Addr) error {
	f := familyOf(ip)
	ch := t.c.AddChain(&nftables.Chain{Name: ingressChain(ip), Table: t.table})
	t.c.FlushChain(ch)
	m := spreadMap(t.table, ip)
	if err := t.c.AddSet(m, nil); err != nil {
		return err
	}
	t.c.FlushSet(m)
	el := []nftables.SetElement{{Key: ip.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: ch.Name}}}
	if err := t.c.SetAddElements(t.set(f.in), el); err != nil {
		return err
	}
	if err := t.c.SetAddElements(t.set(f.ext), []nftables.SetElement{{Key: ip.AsSlice()}}); err != nil {
		return err
	}
	if err := t.c.SetAddElements(m, spreadElements(targets)); err != nil {
		return err
	}
	t.c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: dnatSpread(m, len(targets), f)})
	return nil
}

// dropSpread removes ip's chain, spread map and in4 element, each added
// first so that the deletions find them whether or not they were there.
func (t *Table) dropSpread(ip netip.Addr) error {
	f := familyOf(ip)
	ch := t.c.AddChain(&nftables.Chain{Name: ingressChain(ip), Table: t.table})
	m := spreadMap(t.table, ip)
	if err := t.c.AddSet(m, nil); err != nil {
		return err
	}
	el := []nftables.SetElement{{Key: ip.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: ch.Name}}}
	if err := t.c.SetAddElements(t.set(f.in), el); err != nil {
		return err
	}
	if err := t.c.SetDeleteElements(t.set(f.in), el); err != nil {
		return err
	}
	t.c.DelChain(ch)
	t.c.DelSet(m)
	return nil
}

// addIngress steers a new IP to its one target with additions only: its
// elements of dnat4 and ext4, which ask the kernel for no validation and
// leave its destroy worker nothing, which the next release of a netfilter
// socket on the node would wait for.
func (t *Table) addIngress(ip netip.Addr, target netip.Addr) error {
	f := familyOf(ip)
	if err := t.c.SetAddElements(t.set(f.direct), []nftables.SetElement{{Key: ip.AsSlice(), Val: target.AsSlice()}}); err != nil {
		return err
	}
	return t.c.SetAddElements(t.set(f.ext), []nftables.SetElement{{Key: ip.AsSlice()}})
}

func egressElement(k EgressKey, ip netip.Addr) nftables.SetElement {
	key := append(k.Source.AsSlice(), ifname(k.Uplink)...)
	return nftables.SetElement{Key: key, Val: ip.AsSlice()}
}

// SetEgress makes new flows from k.Source leaving through k.Uplink leave
// from ip. An element already there for k with another IP is replaced in
// one transaction.
func (t *Table) SetEgress(k EgressKey, ip netip.Addr) error {
	if k.Source.Is4() != ip.Is4() {
		return fmt.Errorf("sending %s from %s: families differ", k.Source, ip)
	}
	s := t.set(familyOf(ip).snat)
	el := []nftables.SetElement{egressElement(k, ip)}
	err := t.flush(func() error { return t.c.SetAddElements(s, el) })
	if isExists(err) {
		// The kernel refuses to change an element's value in place.
		if err = t.c.SetDeleteElements(s, el); err == nil {
			err = t.flush(func() error { return t.c.SetAddElements(s, el) })
		}
	}
	if err != nil {
		return fmt.Errorf("sending %s via %s from %s in table inet %s: %w", k.Source, k.Uplink, ip, TableName, err)
	}
	return nil
}

// EgressIP is the IP k's egress rule leaves from, read by its key alone.
func (t *Table) EgressIP(k EgressKey) (netip.Addr, bool, error) {
	val, ok, err := t.c.GetElement(familyOf(k.Source).snat, egressElement(k, k.Source).Key)
	ip, _ := netip.AddrFromSlice(val)
	return ip, ok && err == nil, err
}

// DelEgress removes k's egress rule; one already gone is no error.
func (t *Table) DelEgress(k EgressKey) error {
	s := t.set(familyOf(k.Source).snat)
	if err := t.c.SetDeleteElements(s, []nftables.SetElement{egressElement(k, k.Source)}); err != nil {
		return err
	}
	if err := t.c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("removing egress of %s via %s from table inet %s: %w", k.Source, k.Uplink, TableName, err)
	}
	return nil
}

// hairpinElement is the subnet's interval element (first . first) -
// (last . last), as nft stores 10.88.0.0/24 . 10.88.0.0/24: a flow from
// the subnet DNATed to an address in the same subnet. One element per
// container subnet, not per attachment: the set's backend (pipapo, the
// kernel's for concatenated intervals) rebuilds the whole set on each
// change, which per attachment made every ADD and DEL cost O(attachments).
func hairpinElement(subnet netip.Prefix) []nftables.SetElement {
	return []nftables.SetElement{intervals.Element(intervals.Same(subnet))}
}

// SetHairpin makes flows within subnet hairpin: it adds subnet's element,
// unless one the set holds covers it, and removes those inside it; one
// already there is no error.
func (t *Table) SetHairpin(subnet netip.Prefix) error {
	s := t.set(familyOf(subnet.Addr()).hp)
	err := t.flush(func() error { return t.c.SetAddElements(s, hairpinElement(subnet)) })
	if isExists(err) {
		err = t.applyMerged(Change{Hairpin: []netip.Prefix{subnet}})
	}
	if err != nil {
		return fmt.Errorf("adding hairpin subnet %s to table inet %s: %w", subnet, TableName, err)
	}
	return nil
}

// DelHairpin removes subnet's hairpin element; one already gone is no error.
func (t *Table) DelHairpin(subnet netip.Prefix) error {
	s := t.set(familyOf(subnet.Addr()).hp)
	if err := t.c.SetDeleteElements(s, hairpinElement(subnet)); err != nil {
		return err
	}
	if err := t.c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("removing hairpin subnet %s from table inet %s: %w", subnet, TableName, err)
	}
	return nil
}

// Seen tells whether addr is in its family's set seen4 (seen6): an
// external IP that had a flow DNATed to a target (recordRule), or a
// container address that had a flow SNATed (snatRule). Read after the
// commit that stopped steering to what leaves, an external IP that is not
// there had no flow DNATed by us: the rules record it before they DNAT.
// A table or set this connection made anew (remade: `nft flush ruleset`
// deleted it, with its record) could not have seen the flows of before:
// every address counts as having had flows.
func (t *Table) Seen(addr netip.Addr) (bool, error) {
	if t.remade {
		return true, nil
	}
	_, ok, err := t.c.GetElement(familyOf(addr).seen, addr.AsSlice())
	if err != nil || ok {
		return ok, err
	}
	// The kernel says ENOENT for a missing set as for a missing element: a
	// table of an earlier layout, or one that lost the set, recorded
	// nothing, and every address counts as having had flows.
	have, err := t.hasSeenSets()
	return !have, err
}

// hasSeenSets tells whether the table has both sets of addresses that had
// flows, from one listing of its sets per connection; none when Uplinks'
// dump of the chains on it found the base intact: the base rules record
// into both, and the kernel refuses to delete a set that a rule uses
// (EBUSY). That listing cost a steered DEL 0.13 ms of CPU (A/B paired,
// 95% interval 0.09 to 0.17, exec floor 1.51 ms).
func (t *Table) hasSeenSets() (bool, error) {
	if t.seenSets == nil {
		names, err := t.c.SetNames()
		if err != nil {
			return false, err
		}
		have := names[ipv4.seen] && names[ipv6.seen]
		t.seenSets = &have
	}
	return *t.seenSets, nil
}

// Unsee takes addrs out of the sets of addresses that had flows, once
// their flows are deleted; those already out are no error. Each is added
// first, so that one transaction takes them all in any case.
func (t *Table) Unsee(addrs []netip.Addr) error {
	if err := t.stageSeen(addrs, true); err != nil {
		return err
	}
	if err := t.c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("forgetting that %v had flows, in table inet %s: %w", addrs, TableName, err)
	}
	return nil
}

// seeAll records every external IP with ingress and every container
// address with egress as having had flows: after the base rules were
// made anew (a table of an earlier layout, or one flushed by hand), the
// flows of before were never recorded, and a clean-up must not be skipped
// for them.
func (t *Table) seeAll() error {
	st := &State{Egress: map[EgressKey]netip.Addr{}}
	if err := (reading{tab: t}).readEgress(st); err != nil {
		return err
	}
	var addrs []netip.Addr
	for k := range st.Egress {
		addrs = append(addrs, k.Source)
	}
	for _, f := range []family{ipv4, ipv6} {
		ext, err := (reading{tab: t}).extIPs(f)
		if err != nil {
			return err
		}
		for ip := range ext {
			addrs = append(addrs, ip)
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	if err := t.stageSeen(addrs, false); err != nil {
		return err
	}
	return t.c.Flush()
}

// stageSeen stages each of addrs into its family's seen set, and, with
// out, out of it again: the addition first makes the deletion find it.
func (t *Table) stageSeen(addrs []netip.Addr, out bool) error {
	for _, a := range addrs {
		s, el := t.set(familyOf(a).seen), []nftables.SetElement{{Key: a.AsSlice()}}
		if err := t.c.SetAddElements(s, el); err != nil {
			return err
		}
		if !out {
			continue
		}
		if err := t.c.SetDeleteElements(s, el); err != nil {
			return err
		}
	}
	return nil
}
