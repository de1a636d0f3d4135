package nat

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/google/nftables"
)

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
	for _, p := range intervals.Maximal(ch.Hairpin) {
		if slices.ContainsFunc(held, func(q netip.Prefix) bool { return intervals.Covers(q, p) }) {
			continue
		}
		for _, q := range held {
			if intervals.Covers(p, q) {
				ch.DelHairpin = append(ch.DelHairpin, q)
			}
		}
		add = append(add, p)
	}
	ch.Hairpin = add
	return ch, nil
}

// mergeExclusions rewrites ch's exclusion elements for what the sets
// hold: the held elements less those ch removes, with ch's added, cut so
// that no two overlap (intervals.Plan); nothing when the held elements
// already serve exactly those flows. It reads both sets, so it runs only
// after the kernel refused a change.
func (t *Table) mergeExclusions(ch Change) (Change, error) {
	st := &State{}
	if err := (reading{tab: t}).readExclusions(st); err != nil {
		return ch, err
	}
	want := slices.DeleteFunc(slices.Clone(st.Excluded), func(p intervals.Pair) bool { return slices.Contains(ch.DelExclude, p) })
	ch.Exclude, ch.DelExclude = intervals.Plan(st.Excluded, append(want, ch.Exclude...))
	return ch, nil
}

// stagePairs stages the removal of del from, and the addition of add to,
// the interval set that name gives for each pair's family. Removals come
// first: an added element may overlap one removed.
func stagePairs(t *Table, name func(family) string, del, add []intervals.Pair) error {
	for _, p := range del {
		if err := t.c.SetDeleteElements(t.set(name(familyOf(p.Src.Addr()))), []nftables.SetElement{intervals.Element(p)}); err != nil {
			return err
		}
	}
	for _, p := range add {
		if err := t.c.SetAddElements(t.set(name(familyOf(p.Src.Addr()))), []nftables.SetElement{intervals.Element(p)}); err != nil {
			return err
		}
	}
	return nil
}

// same is the hairpin elements of subnets.
func same(subnets []netip.Prefix) []intervals.Pair {
	out := make([]intervals.Pair, len(subnets))
	for i, p := range subnets {
		out[i] = intervals.Same(p)
	}
	return out
}

// applyMerged makes ch in one transaction after mergeHairpins and
// mergeExclusions.
func (t *Table) applyMerged(ch Change) error {
	ch, err := t.mergeHairpins(ch)
	if err != nil {
		return err
	}
	if len(ch.Exclude)+len(ch.DelExclude) > 0 {
		if ch, err = t.mergeExclusions(ch); err != nil {
			return err
		}
	}
	if err := t.stage(ch); err != nil {
		return err
	}
	return t.c.Flush()
}
