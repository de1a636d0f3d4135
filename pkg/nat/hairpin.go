package nat

import (
	"net/netip"
	"slices"
)

// Covers tells whether the hairpin element of subnet q also serves p:
// every flow within p is a flow within q.
func Covers(q, p netip.Prefix) bool {
	return q.Bits() <= p.Bits() && q.Masked().Contains(p.Addr())
}

// Maximal is subnets, masked, without duplicates and without those that
// another of them covers, sorted: the hairpin elements that serve them all.
// Container subnets overlap when a network's subnet is widened (a /24
// becomes a /16) or a main plugin gives a /32 inside another network's
// subnet, and the hairpin sets (concatenated intervals) refuse an element
// that overlaps one they hold.
func Maximal(subnets []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range subnets {
		p = p.Masked()
		if slices.ContainsFunc(subnets, func(q netip.Prefix) bool { return Covers(q, p) && q.Bits() < p.Bits() }) || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

// mergeHairpins rewrites ch's hairpin additions for what the sets hold
// (those that ch removes aside): a subnet that a held element covers is
// not added, and the held elements inside a subnet that is added are
// removed in the same transaction. It reads both hairpin sets, so it runs
// only after the kernel refused a change.
func (t *Table) mergeHairpins(ch Change) (Change, error) {
	st := &State{}
	if err := (reading{tab: t}).readHairpins(st); err != nil {
		return ch, err
	}
	held := slices.DeleteFunc(st.Hairpin, func(q netip.Prefix) bool { return slices.Contains(ch.DelHairpin, q) })
	var add []netip.Prefix
	for _, p := range Maximal(ch.Hairpin) {
		if slices.ContainsFunc(held, func(q netip.Prefix) bool { return Covers(q, p) }) {
			continue
		}
		for _, q := range held {
			if Covers(p, q) {
				ch.DelHairpin = append(ch.DelHairpin, q)
			}
		}
		add = append(add, p)
	}
	ch.Hairpin = add
	return ch, nil
}

// applyMerged makes ch in one transaction after mergeHairpins.
func (t *Table) applyMerged(ch Change) error {
	ch, err := t.mergeHairpins(ch)
	if err != nil {
		return err
	}
	if err := t.stage(ch); err != nil {
		return err
	}
	return t.c.Flush()
}
