package nat

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The marks of flows that must leave by an uplink other than the main
// table's default route's (package uplinkroute routes them), in our table:
//
//	uplinks        filter hook prerouting, priority mangle (-150), before
//	               our DNAT and before routing. For each marked uplink U
//	               (slot s, mark m within mask M):
//	               iifname "U" ct state new ip daddr @up4-s ct mark set ct mark and ~M or m
//	               ct state new ip saddr @eg4-s ct mark set ct mark and ~M or m   (and ip6)
//	               then, for every slot, ct mark and M == m meta mark set meta mark and ~M or m
//	uplink-marks   ifname : slot, which uplink has which slot (and so mark)
//	up4-s, up6-s   the external IPs whose new flows arriving on U are marked
//	eg4-s, eg6-s   the container addresses whose new flows are marked (egress)
//
// Only the mask's bits of either mark are written: other programs' bits
// stay. The conntrack mark carries the uplink to every packet of the
// flow, replies included, which is what routes a reply out of U.
const (
	chainUplinks   = "uplinks"
	uplinkMarks    = "uplink-marks"
	priorityMangle = -150 // NF_IP_PRI_MANGLE
	ctStateNew     = 8    // NF_CT_STATE_BIT(IP_CT_NEW)
)

// UplinkMember is an address in a slot's set: an external IP (ingress)
// or a container address (Egress).
type UplinkMember struct {
	Slot   int
	Addr   netip.Addr
	Egress bool
}

func (m UplinkMember) set() string { return memberSet(m.Slot, familyOf(m.Addr), m.Egress) }

func memberSet(slot int, f family, egress bool) string {
	kind := "up"
	if egress {
		kind = "eg"
	}
	v := 4
	if f.addrLen == 16 {
		v = 6
	}
	return fmt.Sprintf("%s%d-%d", kind, v, slot)
}

func slotSets(t *nftables.Table, slot int) []*nftables.Set {
	var out []*nftables.Set
	for _, f := range []family{ipv4, ipv6} {
		for _, eg := range []bool{false, true} {
			out = append(out, &nftables.Set{Table: t, Name: memberSet(slot, f, eg), KeyType: f.keyType})
		}
	}
	return out
}

func (t *Table) registry() *nftables.Set {
	return &nftables.Set{Table: t.table, Name: uplinkMarks, IsMap: true, KeyType: nftables.TypeIFName,
		KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeInteger}
}

// UplinkSlot is one marked uplink: its slot and mark.
type UplinkSlot struct {
	Slot int
	Mark uint32
}

// Uplinks reads which uplink has which slot; none when the map is missing.
// The map is asked for directly: one round trip on every steered DEL and
// every routed ADD, whether the map is there or not (ENOENT: no map or no
// table). The library formats that error with %v, so it is known by its
// text; any other failure lists the table's sets to tell, as before.
func (t *Table) Uplinks() (map[string]UplinkSlot, error) {
	els, err := t.r.GetSetElements(t.registry())
	if err == nil {
		return slotsOf(els), nil
	}
	if strings.Contains(err.Error(), unix.ENOENT.Error()) {
		return map[string]UplinkSlot{}, nil
	}
	out, _, err := t.uplinks()
	return out, err
}

func slotsOf(els []nftables.SetElement) map[string]UplinkSlot {
	out := map[string]UplinkSlot{}
	for _, el := range els {
		if len(el.Val) == 4 && len(el.Key) > 0 {
			out[cstring(el.Key)] = UplinkSlot{Slot: int(binary.BigEndian.Uint32(el.Val))}
		}
	}
	return out
}

// uplinks is Uplinks and the names of the table's sets, from one listing
// of them: a DEL reads both, and each listing is a round trip.
func (t *Table) uplinks() (map[string]UplinkSlot, map[string]bool, error) {
	out, names := map[string]UplinkSlot{}, map[string]bool{}
	sets, err := t.r.GetSets(t.table)
	if err != nil && !t.exists() {
		// The library formats listing errors with %v: ENOENT is found by
		// asking for the table, on this rare path only.
		return out, names, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing sets of table inet %s: %w", TableName, err)
	}
	for _, s := range sets {
		names[s.Name] = true
	}
	if !names[uplinkMarks] {
		return out, names, nil
	}
	els, err := t.r.GetSetElements(t.registry())
	if err != nil {
		return nil, nil, fmt.Errorf("listing map %s: %w", uplinkMarks, err)
	}
	return slotsOf(els), names, nil
}

// SetUplinks makes the chain mark exactly the uplinks in all (slot and
// mark of each) within mask: each new slot gets its sets and its entry in
// uplink-marks, a slot gone loses them, and the chain is rewritten. It is
// one transaction, idempotent. With all empty, the chain and the map go.
func (t *Table) SetUplinks(all map[string]UplinkSlot, gone map[string]UplinkSlot, mask uint32) error {
	err := t.flush(func() error { return t.buildUplinks(all, gone, mask) })
	if err != nil {
		return fmt.Errorf("marking uplinks %v in table inet %s: %w", slices.Sorted(maps.Keys(all)), TableName, err)
	}
	return nil
}

func (t *Table) buildUplinks(all, gone map[string]UplinkSlot, mask uint32) error {
	reg := t.registry()
	if err := t.c.AddSet(reg, nil); err != nil {
		return err
	}
	ch := t.c.AddChain(t.uplinkChain())
	t.c.FlushChain(ch)
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		el := []nftables.SetElement{{Key: ifname(name), Val: slotData(gone[name].Slot)}}
		// Added first so that the deletion finds it in any case.
		if err := t.c.SetAddElements(reg, el); err != nil {
			return err
		}
		if err := t.c.SetDeleteElements(reg, el); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		u := all[name]
		for _, s := range slotSets(t.table, u.Slot) {
			if err := t.c.AddSet(s, nil); err != nil {
				return err
			}
		}
		if err := t.c.SetAddElements(reg, []nftables.SetElement{{Key: ifname(name), Val: slotData(u.Slot)}}); err != nil {
			return err
		}
	}
	for _, e := range uplinkRules(all, mask) {
		t.c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: e})
	}
	return t.dropSlots(ch, reg, all, gone)
}

// dropSlots deletes the sets of the slots gone once the rewritten chain no
// longer reads them, and the chain and map when no slot is left.
func (t *Table) dropSlots(ch *nftables.Chain, reg *nftables.Set, all, gone map[string]UplinkSlot) error {
	for _, u := range gone {
		for _, s := range slotSets(t.table, u.Slot) {
			if err := t.c.AddSet(s, nil); err != nil {
				return err
			}
			t.c.DelSet(s)
		}
	}
	if len(all) == 0 {
		t.c.DelChain(ch)
		t.c.DelSet(reg)
	}
	return nil
}

func (t *Table) uplinkChain() *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: chainUplinks, Table: t.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(priorityMangle), Policy: &accept}
}

// uplinkRules is the chain: each uplink's marking rules, then the copy
// of each slot's conntrack mark to the packet mark, for the first packet
// and every later one, in both directions.
func uplinkRules(all map[string]UplinkSlot, mask uint32) [][]expr.Any {
	var out, restore [][]expr.Any
	for _, name := range slices.Sorted(maps.Keys(all)) {
		u := all[name]
		for _, f := range []family{ipv4, ipv6} {
			out = append(out, markIngress(name, u, f, mask), markEgress(u, f, mask))
		}
		restore = append(restore, restoreMark(u.Mark, mask))
	}
	return append(out, restore...)
}

func ctNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(ctStateNew), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
	}
}

// setCtMark: ct mark set ct mark and ~mask or mark.
func setCtMark(mark, mask uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^mask), Xor: native32(mark)},
		&expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true},
	}
}

// markIngress: iifname "U" ct state new ip daddr @up4-s ct mark set ...
func markIngress(uplink string, u UplinkSlot, f family, mask uint32) []expr.Any {
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(uplink)},
	}
	e = append(e, ctNew()...)
	e = append(e, matchFamily(f)...)
	e = append(e, loadAddr(f, f.daddr, reg1), &expr.Lookup{SourceRegister: reg1, SetName: memberSet(u.Slot, f, false)})
	return append(e, setCtMark(u.Mark, mask)...)
}

// markEgress: ct state new ip saddr @eg4-s ct mark set ...
func markEgress(u UplinkSlot, f family, mask uint32) []expr.Any {
	e := append(ctNew(), matchFamily(f)...)
	e = append(e, loadAddr(f, f.saddr, reg1), &expr.Lookup{SourceRegister: reg1, SetName: memberSet(u.Slot, f, true)})
	return append(e, setCtMark(u.Mark, mask)...)
}

// restoreMark: ct mark and M == m meta mark set meta mark and ~M or m.
func restoreMark(mark, mask uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(mask), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^mask), Xor: native32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1, SourceRegister: true},
	}
}

// SetUplinkMembers adds and removes set elements in one transaction. A
// removal of an element that is already gone is retried alone and
// ignored, so that a replay finishes.
func (t *Table) SetUplinkMembers(add, del []UplinkMember) error {
	if len(add)+len(del) == 0 {
		return nil
	}
	err := t.flush(func() error { return t.stageMembers(add, del) })
	if err == nil || !isNotFound(err) {
		return wrapMembers(err)
	}
	if err := t.flush(func() error { return t.stageMembers(add, nil) }); err != nil {
		return wrapMembers(err)
	}
	for _, m := range del {
		if err := t.stageMembers(nil, []UplinkMember{m}); err != nil {
			return wrapMembers(err)
		}
		if err := t.c.Flush(); err != nil && !isNotFound(err) {
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

func (t *Table) stageMembers(add, del []UplinkMember) error {
	for _, m := range add {
		s := &nftables.Set{Table: t.table, Name: m.set(), KeyType: familyOf(m.Addr).keyType}
		if err := t.c.SetAddElements(s, []nftables.SetElement{{Key: m.Addr.AsSlice()}}); err != nil {
			return err
		}
	}
	for _, m := range del {
		s := &nftables.Set{Table: t.table, Name: m.set(), KeyType: familyOf(m.Addr).keyType}
		if err := t.c.SetDeleteElements(s, []nftables.SetElement{{Key: m.Addr.AsSlice()}}); err != nil {
			return err
		}
	}
	return nil
}

// SlotEmpty tells whether every set of slot is empty, asking for one set
// after another until one has an element: a DEL's check whether its
// uplink routes anything any more. It never fails.
func (t *Table) SlotEmpty(slot int) (bool, error) {
	for _, eg := range []bool{false, true} {
		for _, f := range []family{ipv4, ipv6} {
			s := &nftables.Set{Table: t.table, Name: memberSet(slot, f, eg), KeyType: f.keyType}
			els, err := t.r.GetSetElements(s)
			if err != nil {
				// A set that cannot be listed (removed by hand) keeps the
				// slot: a DEL must not fail on it, and GC mends the slot.
				return false, nil
			}
			if len(els) > 0 {
				return false, nil
			}
		}
	}
	return true, nil
}

// UplinkState is the marking as read back from the kernel.
type UplinkState struct {
	Uplinks map[string]UplinkSlot
	// Members lists each slot's addresses.
	Members map[int][]UplinkMember
	// Broken names what of the chain is not as SetUplinks makes it.
	Broken []string
}

// ReadUplinks lists the marking; for CHECK, GC, repair and status.
func (t *Table) ReadUplinks(mask uint32) (*UplinkState, error) {
	st := &UplinkState{Members: map[int][]UplinkMember{}}
	var names map[string]bool
	var err error
	if st.Uplinks, names, err = t.uplinks(); err != nil || len(st.Uplinks) == 0 {
		return st, err
	}
	for name, u := range st.Uplinks {
		u.Mark = markOf(u.Slot, mask)
		st.Uplinks[name] = u
		if err := t.readMembers(st, u.Slot, names); err != nil {
			return nil, err
		}
	}
	rules, err := t.dumpRules(chainUplinks)
	if err != nil {
		st.Broken = append(st.Broken, "chain "+chainUplinks+" missing")
		return st, nil
	}
	var got, want []string
	for _, r := range rules {
		got = append(got, ruleSignature(r))
	}
	for _, e := range uplinkRules(st.Uplinks, mask) {
		want = append(want, ruleSignature(marshalAll(e)))
	}
	if !slices.Equal(got, want) {
		st.Broken = append(st.Broken, fmt.Sprintf("chain %s holds %d rules, not the %d that mark %v", chainUplinks, len(got), len(want), slices.Sorted(maps.Keys(st.Uplinks))))
	}
	return st, nil
}

func (t *Table) readMembers(st *UplinkState, slot int, names map[string]bool) error {
	for _, f := range []family{ipv4, ipv6} {
		for _, eg := range []bool{false, true} {
			name := memberSet(slot, f, eg)
			if !names[name] {
				st.Broken = append(st.Broken, "set "+name+" missing")
				continue
			}
			els, err := t.r.GetSetElements(&nftables.Set{Table: t.table, Name: name, KeyType: f.keyType})
			if err != nil {
				return fmt.Errorf("listing set %s: %w", name, err)
			}
			for _, el := range els {
				if a, ok := netip.AddrFromSlice(el.Key); ok {
					st.Members[slot] = append(st.Members[slot], UplinkMember{Slot: slot, Addr: a, Egress: eg})
				}
			}
		}
	}
	return nil
}

func markOf(slot int, mask uint32) uint32 {
	return uint32(slot) << bits.TrailingZeros32(mask) & mask
}

// slotData is a slot as the registry's integer data: big endian, as nft
// prints an integer of a map that says no byte order.
func slotData(s int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(s)) }
