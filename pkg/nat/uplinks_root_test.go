package nat

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
)

var up1v4 = UplinkChain{Uplink: "uplink1", Slot: 2, Mark: 0x02000000}

// A steered ADD on a routed uplink reads which uplink has which slot from
// the dump of the table's chains that its base check reads too: one dump
// for both, and none at all for a table that is not there yet.
func TestUplinksAndTheBaseCheckAreOneDumpOfTheChains(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		got, err := tb.Uplinks()
		if err != nil || len(got) != 0 {
			t.Fatalf("no table: Uplinks = %v, %v; want none", got, err)
		}
		in := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4}
		must(t, tb.Ensure())
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{up1v4}, UplinkAdd: []UplinkMember{in}}))
		before := tb.c.ChainDumps
		got, err = tb.Uplinks()
		must(t, err)
		want := UplinkSlot{Slot: 2, Mark: 0x02000000, Routed: [2]bool{true, false}, Members: [2]int{1, 0}}
		if got["uplink1"] != want || len(got) != 1 {
			t.Errorf("Uplinks = %+v, want uplink1: %+v", got, want)
		}
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true}, EnsureBase: true}))
		if n := tb.c.ChainDumps - before; n != 1 {
			t.Errorf("Uplinks and the change's base check made %d dumps of the chains, want 1", n)
		}
		// After a commit of ours the dump is not taken for the kernel's.
		before = tb.c.ChainDumps
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4b: {ctrA}}, Fresh: map[netip.Addr]bool{ext4b: true}, EnsureBase: true}))
		if n := tb.c.ChainDumps - before; n != 1 {
			t.Errorf("a later change's base check made %d dumps, want its own 1", n)
		}
	})
}

// A call that takes the node lock reads the routing record, then the
// marking (uplinkroute's Adopt, then Marked): one dump of the chains for
// both, and a new one once a commit of ours came between.
func TestTheRoutingRecordAndTheMarkingAreOneDumpOfTheChains(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		must(t, tb.Ensure())
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{up1v4}}))
		must(t, tb.RecordRouting("", "0f000000-100-1000"))
		before := tb.c.ChainDumps
		rec, err := tb.RoutingRecord()
		must(t, err)
		got, err := tb.Uplinks()
		must(t, err)
		if rec != "0f000000-100-1000" || !got["uplink1"].Routed[0] {
			t.Errorf("record %q, marking %+v: want 0f000000-100-1000 and uplink1 routed", rec, got)
		}
		if n := tb.c.ChainDumps - before; n != 1 {
			t.Errorf("the record and the marking made %d dumps of the chains, want 1", n)
		}
		must(t, tb.UnmarkUplinks([]UplinkChain{up1v4}))
		before = tb.c.ChainDumps
		if got, err = tb.Uplinks(); err != nil || len(got) != 0 {
			t.Errorf("after the chain went, Uplinks = %+v, %v; want none", got, err)
		}
		if n := tb.c.ChainDumps - before; n != 1 {
			t.Errorf("Uplinks after a commit of ours made %d dumps, want its own 1", n)
		}
	})
}

// A change makes a new uplink's chain and its members in its own
// transaction, with its steering; a removal of a member that is not
// there still lets the change through in one transaction; the kernel
// refuses to take away a chain a member still goes to.
func TestApplyChangesTheUplinkMarkingInTheSameTransaction(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		in := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4}
		eg := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ctrA, Egress: true}
		apply := func(what string, ch Change) {
			t.Helper()
			before := tb.c.Commits
			must(t, tb.Apply(ch))
			if n := tb.c.Commits - before; n != 1 {
				t.Errorf("%s took %d transactions, want 1", what, n)
			}
		}
		must(t, tb.Ensure())
		apply("the adding change", Change{
			Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true},
			UplinkMark: []UplinkChain{up1v4}, UplinkAdd: []UplinkMember{in, eg}, EnsureBase: true,
		})
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		if got := st.Members[2]; !slices.Contains(got, in) || !slices.Contains(got, eg) || len(got) != 2 || len(st.Broken) != 0 {
			t.Errorf("after Apply slot 2 holds %v (broken %v), want %v and %v", got, st.Broken, in, eg)
		}
		if err := tb.UnmarkUplinks([]UplinkChain{up1v4}); !errors.Is(err, syscall.EBUSY) {
			t.Errorf("unmarking a chain with members: %v, want EBUSY", err)
		}
		gone := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4b}
		apply("the removing change", Change{Ingress: map[netip.Addr][]netip.Addr{ext4: nil}, UplinkDel: []UplinkMember{in, eg, gone}})
		u, err := tb.Uplinks()
		if err != nil || u["uplink1"].Members != [2]int{0, 0} {
			t.Errorf("after the removing Apply uplink1 is %+v (%v), want no members", u["uplink1"], err)
		}
		must(t, tb.UnmarkUplinks([]UplinkChain{up1v4}))
		must(t, tb.UnmarkUplinks([]UplinkChain{up1v4})) // already gone
		if u, err := tb.Uplinks(); err != nil || len(u) != 0 {
			t.Errorf("after Unmark: %v (%v), want no uplink", u, err)
		}
	})
}

// A change that may empty an uplink's chain removes it in its own
// transaction when it does; when a member still goes to the chain the
// kernel refuses that, and the change is made all the same, without the
// chain's removal, which Unmarked says.
func TestApplyRemovesAChainItEmptiesInTheSameTransaction(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		in := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4}
		other := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4b}
		must(t, tb.Ensure())
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{up1v4}, UplinkAdd: []UplinkMember{in, other}}))
		var unmarked bool
		must(t, tb.Apply(Change{UplinkDel: []UplinkMember{in}, UplinkUnmark: []UplinkChain{up1v4}, Unmarked: &unmarked}))
		u, err := tb.Uplinks()
		must(t, err)
		if unmarked || u["uplink1"].Members != [2]int{1, 0} || !u["uplink1"].Routed[0] {
			t.Errorf("a change leaving %s in the chain: unmarked %v, uplink1 %+v; want the chain kept with 1 member", other.Addr, unmarked, u["uplink1"])
		}
		before := tb.c.Commits
		must(t, tb.Apply(Change{UplinkDel: []UplinkMember{other}, UplinkUnmark: []UplinkChain{up1v4}, Unmarked: &unmarked}))
		if n := tb.c.Commits - before; !unmarked || n != 1 {
			t.Errorf("the change emptying the chain: unmarked %v in %d transactions, want true in 1", unmarked, n)
		}
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		if len(st.Uplinks) != 0 || len(st.Members) != 0 || len(st.Broken) != 0 {
			t.Errorf("after it: %+v, want no uplink, member or mark element", st)
		}
	})
}

// A removal of a member that is not there (refused on its own) still lets
// the emptied chain go in the retried transaction; another uplink's chain,
// its mark element and its member stay.
func TestApplyRemovesAnEmptiedChainDespiteAMemberThatWasNotThere(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		in := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ext4}
		up3 := UplinkChain{Uplink: "uplink3", Slot: 3, Mark: 0x03000000}
		keep := UplinkMember{Slot: 3, Uplink: "uplink3", Addr: ext4b}
		must(t, tb.Ensure())
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{up1v4, up3}, UplinkAdd: []UplinkMember{in, keep}}))
		never := UplinkMember{Slot: 2, Uplink: "uplink1", Addr: ctrA, Egress: true}
		var unmarked bool
		must(t, tb.Apply(Change{UplinkDel: []UplinkMember{in, never}, UplinkUnmark: []UplinkChain{up1v4}, Unmarked: &unmarked}))
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		if !unmarked || len(st.Uplinks) != 1 || !st.Uplinks["uplink3"].Routed[0] || !slices.Equal(st.Members[3], []UplinkMember{keep}) || len(st.Broken) != 0 {
			t.Errorf("unmarked %v, then %+v; want uplink1 gone, uplink3 kept with %v, nothing broken", unmarked, st, keep.Addr)
		}
	})
}

// CHECK's reading finds a chain whose rule was taken away by hand and
// one whose mark element is gone; MarkUplinks makes them anew.
func TestReadUplinksFindsABrokenChainAndMarkUplinksMendsIt(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		must(t, tb.MarkUplinks([]UplinkChain{up1v4}))
		nft(t, netns, "flush", "chain", "inet", TableName, up1v4.name())
		nft(t, netns, "delete", "element", "inet", TableName, "uplink-marks4", "{", "0x02000000", "}")
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		if len(st.Broken) != 2 {
			t.Errorf("broken %q, want the chain's rules and its mark element", st.Broken)
		}
		must(t, tb.MarkUplinks([]UplinkChain{up1v4}))
		if st, err = tb.ReadUplinks(DefaultUplinkMask); err != nil || len(st.Broken) != 0 {
			t.Errorf("after MarkUplinks: broken %q (%v)", st.Broken, err)
		}
	})
}

// A table of layout 4 marked a routed uplink with sets of its slot and a
// map of the slots: the first read of the marking has Ensure move its
// members to this layout's chains, in the transaction that refills the
// base chains, and take the old sets and map away.
func TestEnsureMovesLayout4sUplinkMarkingToChains(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		for _, c := range [][]string{
			{"delete", "chain", "inet", TableName, layoutChain(tb.mask())},
			{"add", "chain", "inet", TableName, "layout-4"},
			{"add", "set", "inet", TableName, "up4-2", "{", "type", "ipv4_addr;", "}"},
			{"add", "set", "inet", TableName, "eg4-2", "{", "type", "ipv4_addr;", "}"},
			{"add", "set", "inet", TableName, "up6-2", "{", "type", "ipv6_addr;", "}"},
			{"add", "element", "inet", TableName, "up4-2", "{", ext4.String(), "}"},
			{"add", "element", "inet", TableName, "eg4-2", "{", ctrA.String(), "}"},
			{"flush", "chain", "inet", TableName, chainUplinks},
			{"add", "rule", "inet", TableName, chainUplinks, "ip", "daddr", "@up4-2", "ct", "mark", "set", "0x02000000"},
		} {
			nft(t, netns, c...)
		}
		// The map as layout 4 made it: its integer data in network order.
		m := &nftables.Set{Table: tb.table, Name: legacyMarks, IsMap: true,
			KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeInteger}
		must(t, tb.c.AddSet(m, []nftables.SetElement{{Key: ifname("uplink1"), Val: []byte{0, 0, 0, 2}}}))
		must(t, tb.c.Flush())
		// The first change's read of the marking moves it (Ensure) first.
		u, err := tb.Uplinks()
		must(t, err)
		if got := u["uplink1"]; got.Slot != 2 || got.Members != [2]int{2, 0} {
			t.Errorf("Uplinks on the table of layout 4 = %+v, want uplink1 in slot 2 with its 2 IPv4 members", got)
		}
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		want := []UplinkMember{{Slot: 2, Uplink: "uplink1", Addr: ext4}, {Slot: 2, Uplink: "uplink1", Addr: ctrA, Egress: true}}
		if got := st.Members[2]; len(got) != 2 || !slices.Contains(got, want[0]) || !slices.Contains(got, want[1]) || len(st.Broken) != 0 {
			t.Errorf("after Ensure slot 2 holds %v (broken %v), want %v", got, st.Broken, want)
		}
		if st.Uplinks["uplink1"].Routed != [2]bool{true, false} {
			t.Errorf("uplink1 = %+v, want its IPv4 chain only", st.Uplinks["uplink1"])
		}
		out := nft(t, netns, "list", "table", "inet", TableName)
		for _, old := range []string{"up4-2", "eg4-2", "up6-2", "map uplink-marks {", "layout-4"} {
			if strings.Contains(out, old) {
				t.Errorf("after Ensure the table still has %s:\n%s", old, out)
			}
		}
	})
}

// `nft flush table` empties the uplink chains with the base chains: the
// next steered change's base check makes the table's fixed part anew,
// and the uplink chains' rules with it.
func TestAFlushedTablesUplinkChainsAreRefilledByTheNextSteeredChange(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{up1v4}, UplinkAdd: []UplinkMember{{Slot: 2, Uplink: "uplink1", Addr: ext4}}}))
		nft(t, netns, "flush", "table", "inet", TableName)
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		must(t, err)
		if len(st.Broken) == 0 {
			t.Fatalf("after nft flush table the uplink chain reads whole: the test models nothing")
		}
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true}, EnsureBase: true}))
		if st, err = tb.ReadUplinks(DefaultUplinkMask); err != nil || len(st.Broken) != 0 || len(st.Members[2]) != 1 {
			t.Errorf("after the steered change: broken %q, members %v (%v); want the chain whole and its member kept", st.Broken, st.Members[2], err)
		}
	})
}

// A table made with another mask is made anew with this one, its uplink
// chains and their marks too: no mark element of the old mask is left to
// count as a member.
func TestATableOfAnotherMaskIsMarkedAnewWithItsChains(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		tb.UplinkMask = 0x00f00000
		must(t, tb.Ensure())
		old := UplinkChain{Uplink: "uplink1", Slot: 2, Mark: 0x00200000}
		must(t, tb.Apply(Change{UplinkMark: []UplinkChain{old}, UplinkAdd: []UplinkMember{{Slot: 2, Uplink: "uplink1", Addr: ext4}}}))
		tb.UplinkMask = 0
		u, err := tb.Uplinks() // finds no marker of this mask: Ensure first
		must(t, err)
		if got := u["uplink1"]; got.Mark != 0x02000000 || got.Members != [2]int{1, 0} {
			t.Errorf("uplink1 after the mask changed = %+v; want mark 0x02000000 and its one member", got)
		}
		st, err := tb.ReadUplinks(DefaultUplinkMask)
		if err != nil || len(st.Broken) != 0 {
			t.Errorf("after the mask changed: broken %q (%v)", st.Broken, err)
		}
	})
}
