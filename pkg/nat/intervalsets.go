package nat

import (
	"errors"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/google/nftables"
)

// merge rewrites ch's elements of the interval sets (hairpin and
// exclusion) for what the sets hold: each set's held elements, less those
// ch removes, with ch's added, merged so that no two overlap
// (intervals.Merge): an element a held one covers is not added, held ones
// inside an added one go in the same transaction. It reads the sets, so
// it runs only after the kernel refused a change.
func (t *Table) merge(ch Change) (Change, error) {
	st, r := &State{}, reading{tab: t}
	if err := errors.Join(r.readHairpins(st), r.readExclusions(st)); err != nil {
		return ch, err
	}
	add, del := intervals.Merge(same(st.Hairpin), same(ch.DelHairpin), same(ch.Hairpin))
	ch.Hairpin, ch.DelHairpin = sources(add), sources(del)
	ch.Exclude, ch.DelExclude = intervals.Merge(st.Excluded, ch.DelExclude, ch.Exclude)
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

// same is the hairpin elements of subnets, and sources their subnets.
func same(subnets []netip.Prefix) []intervals.Pair {
	out := make([]intervals.Pair, len(subnets))
	for i, p := range subnets {
		out[i] = intervals.Same(p)
	}
	return out
}

func sources(pairs []intervals.Pair) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range pairs {
		out = append(out, p.Src)
	}
	return out
}

// applyMerged makes ch in one transaction after merge.
func (t *Table) applyMerged(ch Change) error {
	ch, err := t.merge(ch)
	if err != nil {
		return err
	}
	if err := t.stage(ch); err != nil {
		return err
	}
	return t.c.Flush()
}
