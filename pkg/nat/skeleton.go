package nat

import (
	"fmt"
	"strings"

	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// sets are our named maps and sets, one of each per family.
func (t *Table) sets() []*nftables.Set {
	var out []*nftables.Set
	for _, f := range []family{ipv4, ipv6} {
		out = append(out,
			&nftables.Set{Table: t.table, Name: f.in, IsMap: true, KeyType: f.keyType, DataType: nftables.TypeVerdict},
			&nftables.Set{Table: t.table, Name: f.snat, IsMap: true, Concatenation: true,
				KeyType: nftables.MustConcatSetType(f.keyType, nftables.TypeIFName), DataType: f.keyType},
			&nftables.Set{Table: t.table, Name: f.hp, Concatenation: true, Interval: true,
				KeyType: nftables.MustConcatSetType(f.keyType, f.keyType)},
			&nftables.Set{Table: t.table, Name: f.nosnat, Concatenation: true, Interval: true,
				KeyType: nftables.MustConcatSetType(f.keyType, f.keyType)},
			&nftables.Set{Table: t.table, Name: f.ext, KeyType: f.keyType},
			&nftables.Set{Table: t.table, Name: f.direct, IsMap: true, KeyType: f.keyType, DataType: f.keyType},
			// A full set fails the SNAT rule's record, and the rule with it:
			// room for far more than a node's IPs and containers (each
			// element goes with its clean-up), allocated per element.
			&nftables.Set{Table: t.table, Name: f.seen, KeyType: f.keyType, Dynamic: true, Size: seenSize},
		)
	}
	return out
}

// set is one of sets by name. The list is made once per Table: an ADD
// stages several elements, and each new list cost a dozen allocations.
func (t *Table) set(name string) *nftables.Set {
	if t.named == nil {
		t.named = t.sets()
	}
	for _, s := range t.named {
		if s.Name == name {
			return s
		}
	}
	panic("nat: no set " + name)
}

// markers names the layout marker chains in our table, this layout's
// and earlier ones', and lists the uplink chains (refilled by Ensure:
// a flushed table flushed them too).
func (t *Table) markers() ([]string, []UplinkChain, error) {
	uses, err := t.c.ChainUses()
	if isNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing chains of table inet %s: %w", TableName, err)
	}
	var out []string
	var slots []UplinkChain
	for name := range uses {
		if strings.HasPrefix(name, layoutPrefix) {
			out = append(out, name)
		}
		if c, ok := parseSlotChain(name); ok {
			c.Mark = markOf(c.Slot, t.mask())
			slots = append(slots, c)
		}
	}
	return out, slots, nil
}

// markLayout marks the table as of this layout, in a transaction of its
// own after the base chains are filled.
func (t *Table) markLayout() error {
	t.c.AddChain(&nftables.Chain{Name: layoutChain(t.mask()), Table: t.table})
	if err := t.c.Flush(); err != nil {
		return fmt.Errorf("marking table inet %s as of %s: %w", TableName, layoutTag, err)
	}
	return nil
}

// seenSize is the most elements of seen4 (seen6).
const seenSize = 1 << 20

// layoutTag is the comment on every rule Ensure puts in a base chain, as
// `nft list` shows it, and layoutChain the empty chain by which ADD's one
// dump of the table's chains (baseIntact) tells a table made by an earlier
// version from ours: layout 1's rules (untagged) guarded the DNAT rules
// with `fib daddr type local`, which steers no IP held as a route, with as
// many rules per chain as today. Layout 4 is layout 3 (the rules that
// record flows) with the marker chain; layout 6 gave the SNAT rule and
// the uplink marking of egress the exclusion sets (notExcluded). Give
// both a new number whenever a base rule changes.
const (
	layoutTag = "external-ip layout 6"
	// layoutPrefix names every layout's marker chain, so that Ensure
	// removes an earlier one.
	layoutPrefix = "layout-"
)

// layoutChain is the marker of this layout and of the uplink mask the
// base rules keep: a table made with another mask is made anew.
func layoutChain(mask uint32) string { return fmt.Sprintf("layout-6-%08x", mask) }

// layoutData is layoutTag as rule user data: a comment, as nft writes one.
func layoutData() []byte { return userdata.AppendString(nil, userdata.TypeComment, layoutTag) }

type baseChain struct {
	name     string
	typ      nftables.ChainType
	hook     *nftables.ChainHook
	priority int32
	rules    func(family) [][]expr.Any
	raw      func(family) [][]byte // one rule's marshalled expressions, appended by rawRules
	// count is how many rules Ensure puts in the chain, both families'
	// rules and raw ones: ADD compares it with the kernel's count without
	// building the rules (TestBaseChainCountsAreTheirRules keeps it true).
	count uint32
}

// baseChains are the table's base chains; mask is the uplink marking's.
func baseChains(mask uint32) []baseChain {
	ingress := func(f family) [][]expr.Any { return [][]expr.Any{recordRule(f), ingressRule(f), directRule(f)} }
	nat := nftables.ChainTypeNAT
	return []baseChain{
		{chainPrerouting, nat, nftables.ChainHookPrerouting, priorityDstNAT, ingress, nil, 6},
		{chainOutput, nat, nftables.ChainHookOutput, priorityOutput, ingress, nil, 6},
		{chainPostrouting, nat, nftables.ChainHookPostrouting, prioritySrcNAT,
			func(f family) [][]expr.Any { return [][]expr.Any{snatRule(f)} },
			func(f family) [][]byte { return hairpinRule(f) }, 4},
		{chainUplinks, nftables.ChainTypeFilter, nftables.ChainHookPrerouting, priorityMangle, uplinkRules(mask), nil, 6},
	}
}

func (b baseChain) chain(table *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: b.name, Table: table, Type: b.typ,
		Hooknum: b.hook, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(b.priority)), Policy: &accept}
}

// Ensure makes the table, its maps and its base chains with their rules,
// and then marks the table as of this layout (layoutChain, in place of an
// earlier layout's marker). It is idempotent: the base chains are flushed
// and refilled, the maps (and every external IP's steering) are kept.
// A table or set it found missing is the caller's to refill
// (Change.Remade). Every IP steered and container address SNATed then
// counts as having had flows (seeAll): base rules made anew (an earlier layout, a flushed
// chain, a set deleted by hand) recorded none of the flows before them.
// The chain with a raw rule (postrouting) is flushed and refilled in a
// second transaction of our own (nftconn.Conn.FillChain), so that each
// chain still changes at once, and the marker comes in a third: a crash
// before it leaves a table without the marker (and a new table's
// postrouting empty), which the next ADD that steers makes anew, as
// repair does.
func (t *Table) Ensure() error {
	markers, slots, err := t.markers()
	if err != nil {
		return err
	}
	old, err := t.legacyUplinks(markers)
	if err != nil {
		return err
	}
	if !t.remade {
		if t.remade, err = t.lostElements(); err != nil {
			return err
		}
	}
	t.c.AddTable(t.table)
	// The uplink marking's maps are not in sets(): set() is for the
	// steering's, and a change reads none of these by name.
	for _, s := range append(t.sets(), uplinkSets(t.table)...) {
		if err := t.c.AddSet(s, nil); err != nil {
			return fmt.Errorf("building set %s: %w", s.Name, err)
		}
	}
	// The marker goes until every base chain is filled (markLayout): a
	// crash in between leaves a table that the next ADD makes anew.
	for _, name := range markers {
		m := t.c.AddChain(&nftables.Chain{Name: name, Table: t.table}) // found, whatever ran since
		t.c.DelChain(m)
	}
	for _, b := range baseChains(t.mask()) {
		ch := t.c.AddChain(b.chain(t.table))
		if b.raw != nil {
			continue // filled below, in a transaction of its own
		}
		t.c.FlushChain(ch)
		for _, f := range []family{ipv4, ipv6} {
			for _, e := range b.rules(f) {
				t.c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: e, UserData: layoutData()})
			}
		}
	}
	// The marks are made anew with the chains: a table of another mask
	// keeps no element of its marks, which would count as a member.
	for _, f := range []family{ipv4, ipv6} {
		t.c.FlushSet(f.marksSet(t.table))
	}
	for _, c := range slots {
		if err := t.stageChain(c, true); err != nil {
			return err
		}
	}
	if err := t.stageLegacy(old); err != nil {
		return err
	}
	if err := t.c.Flush(); err != nil {
		return fmt.Errorf("making table inet %s: %w", TableName, err)
	}
	for _, b := range baseChains(t.mask()) {
		if b.raw == nil {
			continue
		}
		if err := t.c.FillChain(b.name, b.marshalled(), layoutData()); err != nil {
			return fmt.Errorf("filling chain %s of table inet %s: %w", b.name, TableName, err)
		}
	}
	if err := t.markLayout(); err != nil {
		return err
	}
	if err := t.seeAll(); err != nil {
		return fmt.Errorf("recording the steered addresses in table inet %s: %w", TableName, err)
	}
	return nil
}

// lostElements tells whether the table or one of its sets is missing (the
// host firewall's `nft flush ruleset` deletes every table): what every
// change put there is then lost, which Ensure alone cannot give back. A
// lookup of the table and one listing of its sets, on Ensure's path only:
// an ADD that finds the table intact pays nothing for it.
func (t *Table) lostElements() (bool, error) {
	if !t.c.Exists() { // the listing's error would not say ENOENT
		return true, nil
	}
	have, err := t.c.SetNames()
	if err != nil {
		return false, err
	}
	for _, s := range append(t.sets(), uplinkSets(t.table)...) {
		if !have[s.Name] {
			return true, nil
		}
	}
	return false, nil
}

// flush sends the batch; when it fails for want of our table or a map of
// it (a first use, or a table deleted by hand), it makes the table and
// sends the batch again, which build fills anew.
func (t *Table) flush(build func() error) error {
	if err := build(); err != nil {
		return err
	}
	err := t.c.Flush()
	if err == nil || !isNotFound(err) {
		return err
	}
	if err := t.Ensure(); err != nil {
		return err
	}
	if err := build(); err != nil {
		return err
	}
	return t.c.Flush()
}

// marshalled are the rules Ensure puts in the chain, in order, each as
// its marshalled expressions: both families' rules, then the raw ones.
func (b baseChain) marshalled() [][][]byte {
	var out [][][]byte
	for _, f := range []family{ipv4, ipv6} {
		for _, r := range b.rules(f) {
			out = append(out, marshalAll(r))
		}
	}
	if b.raw != nil {
		for _, f := range []family{ipv4, ipv6} {
			out = append(out, b.raw(f))
		}
	}
	return out
}

// signatures are the rules Ensure puts in the chain, in order, each as
// nftconn.RuleSignature reads it.
func (b baseChain) signatures() []string {
	var out []string
	for _, r := range b.marshalled() {
		out = append(out, nftconn.RuleSignature(r))
	}
	return out
}
