package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
)

// Layout 4 marked the flows of a routed uplink with rules of its own in
// chain uplinks, reading sets up4-S, up6-S (external IPs) and eg4-S,
// eg6-S (container addresses) of slot S, and kept which uplink had which
// slot in map uplink-marks (ifname : slot). Ensure moves such a table's
// marking to this layout in the transaction that refills the base chains,
// so that no routed flow loses its uplink: each slot with members of a
// family gets that family's chain, each member its element, and the old
// sets and map go once the flushed chain no longer reads them.
const legacyMarks = "uplink-marks"

// legacySet reads a layout 4 set's name, up4-S, up6-S, eg4-S or eg6-S.
// Not a regexp: a package-level one is compiled at every start of the
// plugin, before main, for the rare table of layout 4 (8 page faults of
// every invocation, measured).
func legacySet(name string) (egress, v6 bool, slot int, ok bool) {
	kind, rest, found := strings.Cut(name, "-")
	if !found || len(kind) != 3 || (kind[:2] != "up" && kind[:2] != "eg") || (kind[2] != '4' && kind[2] != '6') {
		return false, false, 0, false
	}
	slot, err := strconv.Atoi(rest)
	if err != nil || slot < 1 || strconv.Itoa(slot) != rest {
		return false, false, 0, false
	}
	return kind[:2] == "eg", kind[2] == '6', slot, true
}

// legacyMarking is what a layout 4 table marked, and the names of its
// sets and map to delete.
type legacyMarking struct {
	chains  []UplinkChain
	members []UplinkMember
	sets    []string
}

// legacyUplinks reads layout 4's marking when the table is of an earlier
// layout (markers holds no marker of this one); one listing of the sets
// when it has none.
func (mk marking) legacyUplinks(markers []string) (*legacyMarking, error) {
	if slices.Contains(markers, layoutChain(mk.tab.mask())) {
		return nil, nil
	}
	sets, err := mk.tab.c.GetSets(mk.tab.table)
	if err != nil {
		return nil, nil // no table: nothing to move
	}
	old := &legacyMarking{}
	slots := map[int]string{}
	for _, s := range sets {
		if s.Name == legacyMarks {
			old.sets = append(old.sets, s.Name)
			els, err := mk.tab.c.GetSetElements(&nftables.Set{Table: mk.tab.table, Name: legacyMarks, IsMap: true,
				KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeInteger})
			if err != nil {
				return nil, fmt.Errorf("listing map %s: %w", legacyMarks, err)
			}
			for _, el := range els {
				if len(el.Val) == 4 {
					slots[int(binary.BigEndian.Uint32(el.Val))] = nftconn.CString(el.Key)
				}
			}
		}
	}
	for _, s := range sets {
		if _, _, _, ok := legacySet(s.Name); ok {
			old.sets = append(old.sets, s.Name)
		}
	}
	return old, mk.readLegacyMembers(old, slots)
}

// readLegacyMembers reads the members of each slot that has an uplink.
func (mk marking) readLegacyMembers(old *legacyMarking, slots map[int]string) error {
	for _, name := range old.sets {
		egress, v6, slot, ok := legacySet(name)
		if !ok {
			continue
		}
		uplink, ok := slots[slot]
		if !ok {
			continue
		}
		f := famOf(v6)
		els, err := mk.tab.c.GetSetElements(&nftables.Set{Table: mk.tab.table, Name: name, KeyType: f.keyType})
		if err != nil {
			return fmt.Errorf("listing set %s: %w", name, err)
		}
		c := UplinkChain{Uplink: uplink, Slot: slot, Mark: markOf(slot, mk.tab.mask()), V6: v6}
		for _, el := range els {
			if a, ok := netip.AddrFromSlice(el.Key); ok {
				old.members = append(old.members, UplinkMember{Slot: slot, Uplink: uplink, Addr: a, Egress: egress})
				if !slices.Contains(old.chains, c) {
					old.chains = append(old.chains, c)
				}
			}
		}
	}
	return nil
}

// stageLegacy stages the move: after the base chains' refill, which
// flushed layout 4's chain uplinks, so that its sets are free to go.
func (mk marking) stageLegacy(old *legacyMarking) error {
	if old == nil {
		return nil
	}
	for _, name := range old.sets {
		mk.tab.c.DelSet(&nftables.Set{Table: mk.tab.table, Name: name})
	}
	for _, c := range old.chains {
		if err := mk.stageChain(c, true); err != nil {
			return err
		}
	}
	return mk.stageMembers(old.members, nil)
}
