package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
)

// Change is every table change of one attachment's change, sent as one
// nf_tables transaction: each commit costs a round trip and a generation,
// so one ADD or DEL should make one.
type Change struct {
	// Ingress sets each listed IP's targets; an empty list removes it.
	Ingress map[netip.Addr][]netip.Addr
	// Egress sets each listed source's external IP; DelEgress removes.
	Egress    map[EgressKey]netip.Addr
	DelEgress []EgressKey
	// Fresh marks the IPs of Ingress that the table does not steer yet
	// (the caller's records gave them no target before): with one target,
	// their elements are added without first reading or removing what the
	// IP had. A change that only adds costs no read, and leaves the
	// kernel nothing to destroy: no destroy worker that the next release
	// of a netfilter socket on the node would wait for.
	Fresh map[netip.Addr]bool
	// Hairpin adds container subnets to the hairpin set, DelHairpin removes.
	Hairpin    []netip.Prefix
	DelHairpin []netip.Prefix
	// Exclude adds elements to the sets of flows no SNAT of ours applies
	// to (container subnet . destination), DelExclude removes.
	Exclude, DelExclude []intervals.Pair
	// UplinkMark makes new uplink chains (see MarkUplinks), which no
	// chain dump found: their rules are added to no flushed chain.
	UplinkMark []UplinkChain
	// UplinkAdd and UplinkDel add and remove addresses of the uplink
	// marking's maps (see SetUplinkMembers); their chains exist or are
	// in UplinkMark.
	UplinkAdd, UplinkDel []UplinkMember
	// UplinkUnmark are chains the change may leave with no member: each
	// goes, with its element in uplink-marksF, after the removals, in the
	// same transaction (the kernel counts what still goes to a chain, so
	// nothing is read first). A chain that still has a member makes the
	// kernel refuse the whole transaction (EBUSY): Apply then makes the
	// change without them. Unmarked, when set, tells which happened.
	UplinkUnmark []UplinkChain
	Unmarked     *bool
	// anyMembersGone stages each of UplinkDel as an addition then its
	// removal, which holds whether or not the map has it, unless it has
	// the key going to another chain (the kernel refuses the addition:
	// Apply then goes step by step): Apply's retry once a removal was
	// refused.
	anyMembersGone bool
	// EnsureBase asks for the base chains and their rules to be checked
	// (one dump of the chains' use counts, baseIntact) and restored before
	// the change: an ADD's elements steer nothing when someone flushed the
	// table or a base chain, and the ADD would return success all the same.
	EnsureBase bool
	// Remade, when set, tells whether the table or one of its sets was
	// made anew on this connection (Ensure found it missing, as after the
	// host firewall's `nft flush ruleset`): the other attachments'
	// elements are then gone, the caller's to give back.
	Remade *bool
}

// Apply makes the change in one transaction. When that transaction is
// refused (the table is missing, a removed element is already gone, an
// egress element has another value), it makes the table if it is missing
// and applies the change one idempotent step at a time.
func (t *Table) Apply(ch Change) error {
	if ch.Remade != nil {
		defer func() { *ch.Remade = t.remade }()
	}
	if ch.EnsureBase {
		if err := t.ensureBase(); err != nil {
			return err
		}
	}
	if ch.Unmarked != nil {
		*ch.Unmarked = false
	}
	first, err := t.commit(ch) // the kernel's reason, kept for the slow way's error
	if first == nil || err != nil {
		return err
	}
	// An uplink member to remove may not be there (an IP that never steered
	// in, a family the uplink does not route): each removal made sure of, still in one transaction.
	if len(ch.UplinkDel) > 0 {
		ch.anyMembersGone = true
		if refused, err := t.commit(ch); refused == nil || err != nil {
			return err
		}
	}
	// A chain that a member still goes to: the change without the chains, which the caller rereads.
	if len(ch.UplinkUnmark) > 0 {
		ch.UplinkUnmark = nil
		if refused, err := t.commit(ch); refused == nil || err != nil {
			return err
		}
	}
	// A refused interval element overlaps one the set holds: the elements merged, still in one transaction.
	if len(ch.Hairpin)+len(ch.Exclude) > 0 && t.applyMerged(ch) == nil {
		return nil
	}
	if err := t.applyEach(ch); err != nil {
		return fmt.Errorf("%w (the change as one transaction was refused first: %v)", err, first)
	}
	return nil
}

// commit stages ch and commits it: refused is the kernel's reason when it
// did not take it (nil: taken), err a failure to stage (a bug, not a
// refusal to retry). Unmarked says whether UplinkUnmark's chains went too.
func (t *Table) commit(ch Change) (refused, err error) {
	if err := t.stage(ch); err != nil {
		return nil, err
	}
	if refused = t.c.Flush(); refused == nil && ch.Unmarked != nil {
		*ch.Unmarked = len(ch.UplinkUnmark) > 0
	}
	return refused, nil
}

func (t *Table) stage(ch Change) error {
	for _, ip := range sortedKeys(ch.Ingress) {
		if err := t.stageIngress(ip, ch.Ingress[ip], ch.Fresh[ip]); err != nil {
			return err
		}
	}
	for k, ip := range ch.Egress {
		if err := t.c.SetAddElements(t.set(familyOf(ip).snat), []nftables.SetElement{egressElement(k, ip)}); err != nil {
			return err
		}
	}
	for _, k := range ch.DelEgress {
		if err := t.c.SetDeleteElements(t.set(familyOf(k.Source).snat), []nftables.SetElement{egressElement(k, k.Source)}); err != nil {
			return err
		}
	}
	hp := func(f family) string { return f.hp }
	if err := stagePairs(t, hp, same(ch.DelHairpin), same(ch.Hairpin)); err != nil {
		return err
	}
	nosnat := func(f family) string { return f.nosnat }
	if err := stagePairs(t, nosnat, ch.DelExclude, ch.Exclude); err != nil {
		return err
	}
	for _, c := range ch.UplinkMark {
		if err := t.stageChain(c, false); err != nil {
			return err
		}
	}
	if ch.anyMembersGone {
		if err := t.stageMembers(ch.UplinkDel, nil); err != nil {
			return err
		}
	}
	if err := t.stageMembers(ch.UplinkAdd, ch.UplinkDel); err != nil {
		return err
	}
	for _, c := range ch.UplinkUnmark {
		if err := t.stageUnmark(c); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) stageIngress(ip netip.Addr, targets []netip.Addr, fresh bool) error {
	if fresh && len(targets) == 1 {
		return t.addIngress(ip, targets[0])
	}
	return t.buildIngress(ip, targets)
}

func (t *Table) applyEach(ch Change) error {
	var errs []error
	for _, ip := range sortedKeys(ch.Ingress) {
		errs = append(errs, t.SetIngress(ip, ch.Ingress[ip]))
	}
	for _, k := range ch.DelEgress {
		errs = append(errs, t.DelEgress(k))
	}
	for k, ip := range ch.Egress {
		errs = append(errs, t.SetEgress(k, ip))
	}
	for _, h := range ch.DelHairpin {
		errs = append(errs, t.DelHairpin(h))
	}
	for _, h := range ch.Hairpin {
		errs = append(errs, t.SetHairpin(h))
	}
	if len(ch.Exclude)+len(ch.DelExclude) > 0 {
		errs = append(errs, t.applyMerged(Change{Exclude: ch.Exclude, DelExclude: ch.DelExclude}))
	}
	errs = append(errs, t.MarkUplinks(ch.UplinkMark), t.SetUplinkMembers(ch.UplinkAdd, ch.UplinkDel))
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ensureBase makes the table's fixed part anew (Ensure) when a base chain
// is missing or does not hold exactly the rules Ensure puts there.
func (t *Table) ensureBase() error {
	ok, err := t.baseIntact()
	if err != nil {
		return fmt.Errorf("reading the base chains of table inet %s: %w", TableName, err)
	}
	if ok {
		return nil
	}
	return t.Ensure()
}

// baseIntact tells whether each base chain holds as many rules as Ensure
// puts there, in a table of this version's layout (layoutChain). It costs
// one dump of the table's chains, read for each chain's name and use
// count (nftconn's Take): it finds a chain with rules added or taken away,
// and a table made by an earlier version or whose Ensure was cut short (no
// marker); a rule edited by hand is Read's to find (CHECK, GC, repair,
// status). A missing table or chain is not intact. A base chain whose use
// reads 0, as a flushed one does (the fault that leaves an ADD's elements
// steering nothing), is asked again by its rules (rulesIntact), the dump
// this check replaced: a kernel that counted no rules in a chain's use
// would otherwise have every ADD make the table anew. That dump on every
// steered call cost 15 to 17 page faults more per ADD, and +1.3 ms per
// DEL and +1.6 ms per ADD beside a second uplink end to end (A/B, each
// 95% interval above 0, in a slow run; docs/performance.md, "Figures
// behind design choices"). The kernel changes a
// chain's use as another process's batch is staged, before it commits, so
// a check beside a concurrent Ensure may read that batch's counts; only
// if the batch then failed would it have read wrong.
func (t *Table) baseIntact() (bool, error) {
	uses, err := t.c.Take() // Uplinks', read before the change
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	intact, zero := countedBase(uses, t.mask())
	if zero {
		return t.rulesIntact()
	}
	return intact, nil
}

// countedBase reads a dump of the chains' use counts as baseIntact does:
// intact with the layout marker and each base chain's use its number of
// rules; zero when a chain's use reads 0 (its rules then tell).
func countedBase(uses map[string]uint32, mask uint32) (intact, zero bool) {
	if _, ok := uses[layoutChain(mask)]; !ok {
		return false, false
	}
	for _, b := range baseChains(mask) {
		if use, ok := uses[b.name]; !ok || use != b.count {
			return false, ok && use == 0
		}
	}
	return true, false
}

// rulesIntact tells whether each base chain holds as many rules as Ensure
// puts there, every one of them tagged with this version's layout, from
// one dump of the table's rules read only for each rule's chain and user
// data.
func (t *Table) rulesIntact() (bool, error) {
	n, err := t.c.CountRules(layoutData())
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, b := range baseChains(t.mask()) {
		if want := int(b.count); n[b.name] != (nftconn.RuleCount{All: want, Tagged: want}) {
			return false, nil
		}
	}
	return true, nil
}
