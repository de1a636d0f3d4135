package nat

import (
	"fmt"

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

func (t *Table) set(name string) *nftables.Set {
	for _, s := range t.sets() {
		if s.Name == name {
			return s
		}
	}
	panic("nat: no set " + name)
}

// seenSize is the most elements of seen4 (seen6).
const seenSize = 1 << 20

// layoutTag is the comment on every rule Ensure puts in a base chain, as
// `nft list` shows it. It names the layout of this version's base rules,
// so that ADD's one dump of the table's rules (baseIntact) tells a table
// made by an earlier version from ours: layout 1's rules (untagged) guarded
// the DNAT rules with `fib daddr type local`, which steers no IP held as a
// route, with as many rules per chain as today. Give it a new number
// whenever a base rule changes.
const layoutTag = "external-ip layout 3"

// layoutData is layoutTag as rule user data: a comment, as nft writes one.
func layoutData() []byte { return userdata.AppendString(nil, userdata.TypeComment, layoutTag) }

type baseChain struct {
	name     string
	hook     *nftables.ChainHook
	priority int32
	rules    func(family) [][]expr.Any
	raw      func(family) [][]byte // one rule's marshalled expressions, appended by rawRules
}

func baseChains() []baseChain {
	ingress := func(f family) [][]expr.Any { return [][]expr.Any{recordRule(f), ingressRule(f), directRule(f)} }
	return []baseChain{
		{chainPrerouting, nftables.ChainHookPrerouting, priorityDstNAT, ingress, nil},
		{chainOutput, nftables.ChainHookOutput, priorityOutput, ingress, nil},
		{chainPostrouting, nftables.ChainHookPostrouting, prioritySrcNAT,
			func(f family) [][]expr.Any { return [][]expr.Any{snatRule(f)} },
			func(f family) [][]byte { return hairpinRule(f) }},
	}
}

func (t *Table) chain(b baseChain) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: b.name, Table: t.table, Type: nftables.ChainTypeNAT,
		Hooknum: b.hook, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(b.priority)), Policy: &accept}
}

// Ensure makes the table, its maps and its base chains with their rules.
// It is idempotent: the base chains are flushed and refilled, the maps
// (and every external IP's steering) are kept. Every IP steered and
// container address SNATed then counts as having had flows (seeAll): base
// rules made anew (an earlier layout, a flushed chain, a set deleted by
// hand) recorded none of the flows before them. The chain with a raw rule
// (postrouting) is flushed and refilled in a second transaction of our own
// (fillChain), so that each chain still changes at once; a crash between
// leaves a new table's postrouting empty, which Read reports as broken and
// repair mends.
func (t *Table) Ensure() error {
	t.c.AddTable(t.table)
	for _, s := range t.sets() {
		if err := t.c.AddSet(s, nil); err != nil {
			return fmt.Errorf("building set %s: %w", s.Name, err)
		}
	}
	for _, b := range baseChains() {
		ch := t.c.AddChain(t.chain(b))
		if b.raw != nil {
			continue // fillChain's
		}
		t.c.FlushChain(ch)
		for _, f := range []family{ipv4, ipv6} {
			for _, e := range b.rules(f) {
				t.c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: e, UserData: layoutData()})
			}
		}
	}
	if err := t.c.Flush(); err != nil {
		return fmt.Errorf("making table inet %s: %w", TableName, err)
	}
	for _, b := range baseChains() {
		if err := t.fillChain(b); err != nil {
			return fmt.Errorf("filling chain %s of table inet %s: %w", b.name, TableName, err)
		}
	}
	if err := t.seeAll(); err != nil {
		return fmt.Errorf("recording the steered addresses in table inet %s: %w", TableName, err)
	}
	return nil
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
