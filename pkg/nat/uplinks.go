package nat

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// The marks of flows that must leave by an uplink other than the main
// table's default route's (package uplinkroute routes them), in our table
// (layout 6):
//
//	uplinks            base chain, filter hook prerouting, priority mangle
//	                   (-150): before our DNAT and before routing. Made by
//	                   Ensure, the same on every node (M: the mask):
//	                   meta nfproto ipv4 ct mark and M vmap @uplink-marks4
//	                   ct state new ip daddr . iifname vmap @uplink-in4
//	                   ct state new ip saddr . ip daddr != @nosnat4 ip saddr vmap @uplink-eg4  (and ip6)
//	uplink4-S-U        per routed uplink U (slot S, mark m) and family:
//	                   ct mark set ct mark and ~M or m meta mark set meta mark and ~M or m
//	uplink-marks4      m : goto uplink4-S-U, every packet of a marked flow
//	uplink-in4         EXTERNAL-IP . "U" : goto uplink4-S-U, new flows in
//	uplink-eg4         CONTAINER-ADDRESS : goto uplink4-S-U, new flows out
//
// A new uplink costs a chain, its rule and an element, staged in the
// ADD's own transaction; an address is one element. Which uplink has
// which slot is read from the chains' names, in the dump of the table's
// chains that a steered ADD makes anyway (baseIntact), and how many
// addresses go to a chain from its use count in the same dump, where
// dumping the two maps of each family grows with their members and cost
// 8 to 18 page faults, 0.4 to 0.9 ms end to end and up to 1.1 ms of CPU
// more per call at one member (A/B in a slow run, each 95% interval
// above 0; docs/performance.md, "Figures behind design choices"). A chain
// exists only once its family's rules and route do (the ADD routes
// first), so an ADD that finds it trusts it; CHECK, GC and repair read the
// rest. Only the mask's bits of either mark are written: other programs'
// bits stay. The conntrack mark carries the uplink to every packet of the
// flow, replies included, which is what routes a reply out of U. Each
// element that goes to a chain makes the commit that adds it validate
// the table's verdict maps (figure: docs/uplinks.md).
const (
	chainUplinks   = "uplinks"
	priorityMangle = -150 // NF_IP_PRI_MANGLE
	ctStateNew     = 8    // NF_CT_STATE_BIT(IP_CT_NEW)
	// DefaultUplinkMask is the mask a table is made with when its
	// opener names none: uplinkroute's default.
	DefaultUplinkMask = 0x0f000000
	// slotChainRefs is what a slot chain's use counts besides its
	// members: its rule and its element in uplink-marksF.
	slotChainRefs = 2
)

// marking is the table's uplink marking: the chains, maps and elements
// above, and the move of layout 4's (legacy.go). Table embeds it, so that
// its exported methods are the table's; it reaches the table's connection
// and fixed part (Ensure) through tab.
type marking struct{ tab *Table }

// UplinkChain is one family's marking of one routed uplink.
type UplinkChain struct {
	Uplink string
	Slot   int
	Mark   uint32
	V6     bool
}

func (c UplinkChain) name() string { return slotChain(c.Uplink, c.Slot, c.V6) }

func (c UplinkChain) family() family { return famOf(c.V6) }

func famOf(v6 bool) family {
	if v6 {
		return ipv6
	}
	return ipv4
}

// slotChain names the chain of uplink's slot for a family: uplink4-1-eth1.
func slotChain(uplink string, slot int, v6 bool) string {
	return fmt.Sprintf("uplink%d-%d-%s", famOf(v6).version(), slot, uplink)
}

// parseSlotChain reads a slotChain name back; ok is false for any other.
func parseSlotChain(name string) (c UplinkChain, ok bool) {
	rest, v4 := strings.CutPrefix(name, "uplink4-")
	rest, v6 := strings.CutPrefix(rest, "uplink6-")
	if !v4 && !v6 {
		return c, false
	}
	n, uplink, ok := strings.Cut(rest, "-")
	slot, err := strconv.Atoi(n)
	if !ok || err != nil || slot < 1 || uplink == "" || strconv.Itoa(slot) != n {
		return c, false
	}
	return UplinkChain{Uplink: uplink, Slot: slot, V6: v6}, true
}

// UplinkMember is an address that goes to its uplink's chain: an external
// IP whose new flows arriving on Uplink are marked (ingress), or a
// container address whose new flows are (Egress).
type UplinkMember struct {
	Slot   int
	Uplink string
	Addr   netip.Addr
	Egress bool
}

func (m UplinkMember) chain() string { return slotChain(m.Uplink, m.Slot, m.Addr.Is6()) }

// element is the member as its map holds it: uplink-in4 is keyed by the
// IP and the uplink, as the SNAT map is by the source and the uplink.
func (m UplinkMember) element() (*nftables.Set, nftables.SetElement) {
	f := familyOf(m.Addr)
	el := nftables.SetElement{Key: m.Addr.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: m.chain()}}
	if m.Egress {
		return f.uplinkSet(nil, false), el
	}
	el.Key = append(el.Key, ifname(m.Uplink)...)
	return f.uplinkSet(nil, true), el
}

// UplinkSlot is one marked uplink: its slot and mark, which families it
// routes, and how many members each family's chain has.
type UplinkSlot struct {
	Slot int
	Mark uint32
	// Routed: the family's chain is there, and so its rules and route.
	Routed [2]bool
	// Members counts the elements that go to the family's chain, as its
	// use count says; -1 where a chain reads fewer uses than its own.
	Members [2]int
}

// uplinkSets are the maps of the marking, a set of three per family.
func uplinkSets(t *nftables.Table) []*nftables.Set {
	var out []*nftables.Set
	for _, f := range []family{ipv4, ipv6} {
		out = append(out, f.marksSet(t), f.uplinkSet(t, true), f.uplinkSet(t, false))
	}
	return out
}

func (f family) marksSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: f.upMarks, IsMap: true, KeyType: nftables.TypeMark,
		KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeVerdict}
}

func (f family) uplinkSet(t *nftables.Table, ingress bool) *nftables.Set {
	if ingress {
		return &nftables.Set{Table: t, Name: f.upIn, IsMap: true, Concatenation: true,
			KeyType: nftables.MustConcatSetType(f.keyType, nftables.TypeIFName), DataType: nftables.TypeVerdict}
	}
	return &nftables.Set{Table: t, Name: f.upEg, IsMap: true, KeyType: f.keyType, DataType: nftables.TypeVerdict}
}

func (f family) version() int {
	if f.addrLen == 16 {
		return 6
	}
	return 4
}

// uplinkRules are the base chain's rules of family f (see above).
func uplinkRules(mask uint32) func(family) [][]expr.Any {
	return func(f family) [][]expr.Any {
		restore := append(matchFamily(f),
			&expr.Ct{Key: expr.CtKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(mask), Xor: native32(0)},
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: f.upMarks})
		in := append(ctNew(), matchFamily(f)...)
		in = append(in, loadAddr(f, f.daddr, reg1), &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: f.second()},
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: f.upIn})
		// A flow its network excludes from SNAT is not the external IP's:
		// the main table routes it (to another node's pod, say).
		eg := append(ctNew(), notExcluded(f)...)
		eg = append(eg, &expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: f.upEg})
		return [][]expr.Any{restore, in, eg}
	}
}

func ctNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(ctStateNew), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
	}
}

// slotRules is the chain's one rule: ct mark set ct mark and ~M or m
// meta mark set meta mark and ~M or m. One rule, not one per statement:
// each rule is a message and an acknowledgement of the ADD that makes
// the chain.
func slotRules(mark, mask uint32) [][]expr.Any {
	set := func(load, store expr.Any) []expr.Any {
		return []expr.Any{load,
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^mask), Xor: native32(mark)},
			store}
	}
	return [][]expr.Any{append(
		set(&expr.Ct{Key: expr.CtKeyMARK, Register: reg1}, &expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true}),
		set(&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1}, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1, SourceRegister: true})...)}
}

func (mk marking) slotChainOf(c UplinkChain) *nftables.Chain {
	return &nftables.Chain{Name: c.name(), Table: mk.tab.table}
}

func marksElement(c UplinkChain) []nftables.SetElement {
	return []nftables.SetElement{{Key: native32(c.Mark), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.name()}}}
}

// stageChain stages c's chain, its rules and its element in
// uplink-marksF; refill flushes a chain that may be there already (GC's
// repair), where an ADD's new chain is not (the chain dump said so) and
// a flush would make the commit destroy, which costs its socket's close.
func (mk marking) stageChain(c UplinkChain, refill bool) error {
	ch := mk.tab.c.AddChain(mk.slotChainOf(c))
	if refill {
		mk.tab.c.FlushChain(ch)
	}
	for _, e := range slotRules(c.Mark, mk.tab.mask()) {
		mk.tab.c.AddRule(&nftables.Rule{Table: mk.tab.table, Chain: ch, Exprs: e})
	}
	return mk.tab.c.SetAddElements(c.family().marksSet(mk.tab.table), marksElement(c))
}

// MarkUplinks makes each chain with its rules and element anew, in one
// transaction: GC's and repair's, idempotent.
func (mk marking) MarkUplinks(chains []UplinkChain) error {
	if len(chains) == 0 {
		return nil
	}
	err := mk.tab.flush(func() error {
		for _, c := range chains {
			if err := mk.stageChain(c, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("marking uplinks %v in table inet %s: %w", chainNames(chains), TableName, err)
	}
	return nil
}

// UnmarkUplinks removes each chain and its element in one transaction;
// one already gone is no error. The kernel refuses to delete a chain that
// an element still goes to (EBUSY): a member added since the caller found
// the chain empty keeps it, and the whole removal with it.
func (mk marking) UnmarkUplinks(chains []UplinkChain) error {
	if len(chains) == 0 {
		return nil
	}
	for _, c := range chains {
		if err := mk.stageUnmark(c); err != nil {
			return err
		}
	}
	if err := mk.tab.c.Flush(); err != nil {
		return fmt.Errorf("unmarking uplinks %v in table inet %s: %w", chainNames(chains), TableName, err)
	}
	return nil
}

// stageUnmark stages the removal of c's chain (its rule with it) and of
// its element in uplink-marksF, each added first so that the deletions
// find them whether or not they are there.
func (mk marking) stageUnmark(c UplinkChain) error {
	ch := mk.tab.c.AddChain(mk.slotChainOf(c))
	s := c.family().marksSet(mk.tab.table)
	if err := mk.tab.c.SetAddElements(s, marksElement(c)); err != nil {
		return err
	}
	if err := mk.tab.c.SetDeleteElements(s, []nftables.SetElement{{Key: native32(c.Mark)}}); err != nil {
		return err
	}
	mk.tab.c.DelChain(ch)
	return nil
}

func chainNames(cs []UplinkChain) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name())
	}
	return out
}

// Uplinks reads which uplink has which slot, which families each routes
// and how many members each family's chain has, from the dump of the
// table's chains that the routing record was read from (RoutingRecord,
// under the node lock) if no commit of ours came since (nftconn's Take),
// and leaves it to a steered ADD's base check; none when there is no
// table.
//
// A table of another layout or mask (an upgrade) is made this layout's
// first (Ensure, which moves layout 4's marking): a change planned on the
// old marking would find none of its uplinks marked.
func (mk marking) Uplinks() (map[string]UplinkSlot, error) {
	uses, err := mk.tab.c.Take()
	if isNotFound(err) {
		return map[string]UplinkSlot{}, nil
	}
	if err == nil {
		if _, ok := uses[layoutChain(mk.tab.mask())]; !ok {
			if err = mk.tab.Ensure(); err == nil {
				uses, err = mk.tab.c.ChainUses()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing chains of table inet %s: %w", TableName, err)
	}
	mk.tab.c.Keep(uses)
	if intact, _ := countedBase(uses, mk.tab.mask()); intact {
		mk.tab.seenSets = &intact // the base rules hold them (hasSeenSets)
	}
	return slotsOf(uses, mk.tab.mask()), nil
}

// slotsOf reads the uplinks' chains; an uplink whose chains have two
// slots (ReadUplinks calls that broken) reads as its lowest, whatever
// the order of the dump.
func slotsOf(uses map[string]uint32, mask uint32) map[string]UplinkSlot {
	out := map[string]UplinkSlot{}
	for name, use := range uses {
		c, ok := parseSlotChain(name)
		if !ok {
			continue
		}
		if u, ok := out[c.Uplink]; ok && u.Slot != c.Slot {
			if u.Slot < c.Slot {
				continue
			}
			delete(out, c.Uplink)
		}
		u := out[c.Uplink]
		u.Slot, u.Mark = c.Slot, markOf(c.Slot, mask)
		f := fam(c.V6)
		u.Routed[f], u.Members[f] = true, int(use)-slotChainRefs
		if use < slotChainRefs {
			u.Members[f] = -1
		}
		out[c.Uplink] = u
	}
	return out
}

func fam(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// SetUplinkMembers adds and removes members in one transaction. A
// removal of an element that is already gone is retried alone and
// ignored, so that a replay finishes.
func (mk marking) SetUplinkMembers(add, del []UplinkMember) error {
	if len(add)+len(del) == 0 {
		return nil
	}
	err := mk.tab.flush(func() error { return mk.stageMembers(add, del) })
	if err == nil || !isNotFound(err) {
		return wrapMembers(err)
	}
	if err := mk.tab.flush(func() error { return mk.stageMembers(add, nil) }); err != nil {
		return wrapMembers(err)
	}
	for _, m := range del {
		if err := mk.stageMembers(nil, []UplinkMember{m}); err != nil {
			return wrapMembers(err)
		}
		if err := mk.tab.c.Flush(); err != nil && !isNotFound(err) {
			return wrapMembers(err)
		}
	}
	return nil
}

func wrapMembers(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("changing the marked addresses of table inet %s: %w", TableName, err)
}

// stageMembers stages the removals first: an egress address that moves
// to another uplink is removed from one chain and added to the other.
func (mk marking) stageMembers(add, del []UplinkMember) error {
	for _, m := range del {
		s, el := m.element()
		s.Table, el.VerdictData = mk.tab.table, nil // removed by key, whichever chain it goes to
		if err := mk.tab.c.SetDeleteElements(s, []nftables.SetElement{el}); err != nil {
			return err
		}
	}
	for _, m := range add {
		s, el := m.element()
		s.Table = mk.tab.table
		if err := mk.tab.c.SetAddElements(s, []nftables.SetElement{el}); err != nil {
			return err
		}
	}
	return nil
}

// UplinkState is the marking as read back from the kernel.
type UplinkState struct {
	Uplinks map[string]UplinkSlot
	// Members lists each slot's addresses.
	Members map[int][]UplinkMember
	// Broken names what of the marking is not as MarkUplinks makes it.
	Broken []string
}

// ReadUplinks lists the marking; for CHECK, GC, repair and status.
func (mk marking) ReadUplinks(mask uint32) (*UplinkState, error) {
	st := &UplinkState{Members: map[int][]UplinkMember{}}
	uses, err := mk.tab.c.ChainUses()
	if isNotFound(err) {
		st.Uplinks = map[string]UplinkSlot{}
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing chains of table inet %s: %w", TableName, err)
	}
	st.Uplinks = slotsOf(uses, mask)
	st.Broken = twoSlots(uses)
	for _, f := range []family{ipv4, ipv6} {
		if err := mk.readMembers(st, f); err != nil {
			return nil, err
		}
		if err := mk.readMarks(st, f, mask); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// twoSlots names an uplink whose families' chains have different slots.
func twoSlots(uses map[string]uint32) []string {
	var out []string
	slots := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		c, ok := parseSlotChain(name)
		if !ok {
			continue
		}
		if s, ok := slots[c.Uplink]; ok && s != c.Slot {
			out = append(out, fmt.Sprintf("uplink %s has chains of slots %d and %d", c.Uplink, s, c.Slot))
		}
		slots[c.Uplink] = c.Slot
	}
	return out
}

// readMembers lists f's members from its two maps; an element that goes
// to no chain of ours is broken.
func (mk marking) readMembers(st *UplinkState, f family) error {
	for _, ingress := range []bool{true, false} {
		s := f.uplinkSet(mk.tab.table, ingress)
		els, err := mk.tab.c.GetSetElements(s)
		if err != nil {
			st.Broken = append(st.Broken, "map "+s.Name+" missing")
			continue
		}
		for _, el := range els {
			m, ok := memberOf(el, f, ingress)
			if !ok {
				st.Broken = append(st.Broken, fmt.Sprintf("map %s holds an element of key %x that goes to no uplink chain", s.Name, el.Key))
				continue
			}
			st.Members[m.Slot] = append(st.Members[m.Slot], m)
		}
	}
	return nil
}

func memberOf(el nftables.SetElement, f family, ingress bool) (UplinkMember, bool) {
	if len(el.Key) < int(f.addrLen) {
		return UplinkMember{}, false
	}
	c, ok := parseSlotChain(nftconn.VerdictChain(el.Val))
	addr, _ := netip.AddrFromSlice(el.Key[:f.addrLen])
	if !ok || c.V6 != (f.addrLen == 16) || ingress && nftconn.CString(el.Key[f.addrLen:]) != c.Uplink {
		return UplinkMember{}, false
	}
	return UplinkMember{Slot: c.Slot, Uplink: c.Uplink, Addr: addr, Egress: !ingress}, true
}

// readMarks checks each chain of family f: its element in uplink-marksF
// and its rule.
func (mk marking) readMarks(st *UplinkState, f family, mask uint32) error {
	s := f.marksSet(mk.tab.table)
	els, err := mk.tab.c.GetSetElements(s)
	if err != nil {
		st.Broken = append(st.Broken, "map "+s.Name+" missing")
		return nil
	}
	goes := map[string]uint32{}
	for _, el := range els {
		if len(el.Key) == 4 {
			goes[nftconn.VerdictChain(el.Val)] = binary.NativeEndian.Uint32(el.Key)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.Uplinks)) {
		u := st.Uplinks[name]
		c := UplinkChain{Uplink: name, Slot: u.Slot, Mark: u.Mark, V6: f.addrLen == 16}
		if !u.Routed[fam(c.V6)] {
			continue
		}
		if m, ok := goes[c.name()]; !ok || m != c.Mark {
			st.Broken = append(st.Broken, fmt.Sprintf("map %s does not send mark %#x to chain %s", s.Name, c.Mark, c.name()))
		}
		rules, err := mk.tab.c.DumpRules(c.name())
		if err != nil {
			return fmt.Errorf("listing rules of chain %s: %w", c.name(), err)
		}
		var got, want []string
		for _, r := range rules {
			got = append(got, nftconn.RuleSignature(r))
		}
		for _, e := range slotRules(c.Mark, mask) {
			want = append(want, nftconn.RuleSignature(marshalAll(e)))
		}
		if !slices.Equal(got, want) {
			st.Broken = append(st.Broken, fmt.Sprintf("chain %s holds %d rules, not the one that sets mark %#x", c.name(), len(got), c.Mark))
		}
	}
	return nil
}

func markOf(slot int, mask uint32) uint32 {
	return uint32(slot) << bits.TrailingZeros32(mask) & mask
}

// routingPrefix names the empty chain that records the uplink routing's
// config (package uplinkroute writes and reads it).
const routingPrefix = "routing-"

// RoutingRecord is the uplink routing's record, "" for none.
func (mk marking) RoutingRecord() (string, error) { return mk.tab.c.Marker(routingPrefix) }

// RecordRouting puts rec in place of the record was, in one transaction.
func (mk marking) RecordRouting(was, rec string) error {
	return mk.tab.c.SetMarker(mk.tab.table, routingPrefix, was, rec)
}
