package nat

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
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
