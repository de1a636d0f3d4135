package nat

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
)

// countingReader counts the round trips of each kind of read.
type countingReader struct {
	reader
	sets, elements, tables int
}

func (c *countingReader) ListTableOfFamily(name string, f nftables.TableFamily) (*nftables.Table, error) {
	c.tables++
	return c.reader.ListTableOfFamily(name, f)
}

func (c *countingReader) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	c.sets++
	return c.reader.GetSets(t)
}

func (c *countingReader) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	c.elements++
	return c.reader.GetSetElements(s)
}

// Every steered DEL and routed ADD reads which uplink has which slot:
// that is one read of the map (it was a listing of the table's sets, then
// the map), also on a node with no map or no table yet, which reads as
// none.
func TestUplinksIsOneReadOfTheMap(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		c := &countingReader{reader: tb.r}
		tb.r = c
		for _, step := range []string{"no table", "marked"} {
			if step == "marked" {
				want := map[string]UplinkSlot{"uplink1": {Slot: 2}}
				must(t, tb.SetUplinks(want, nil, 0xff00))
				c.sets, c.elements, c.tables = 0, 0, 0
				got, err := tb.Uplinks()
				if err != nil || !maps.Equal(got, want) {
					t.Fatalf("Uplinks = %v, %v; want %v", got, err, want)
				}
				if c.sets+c.elements+c.tables != 1 {
					t.Errorf("Uplinks made %d set listings, %d element reads and %d table reads; want 1 read in all", c.sets, c.elements, c.tables)
				}
				// The last slot gone: the table stays, without the map.
				must(t, tb.SetUplinks(nil, want, 0xff00))
				step = "map gone"
			}
			c.sets, c.elements, c.tables = 0, 0, 0
			got, err := tb.Uplinks()
			if err != nil || len(got) != 0 {
				t.Errorf("%s: Uplinks = %v, %v; want none", step, got, err)
			}
			if c.sets+c.elements+c.tables != 1 {
				t.Errorf("%s: Uplinks made %d set listings, %d element reads and %d table reads; want 1 read in all", step, c.sets, c.elements, c.tables)
			}
		}
	})
}

// A change's uplink members go in its own transaction, with its steering:
// the sets hold them once Apply returns, and a removal of a member that
// is not there (one that never was, or a replay's) still lets the change
// through in one transaction.
func TestApplyChangesTheUplinkSetsInTheSameTransaction(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		must(t, tb.SetUplinks(map[string]UplinkSlot{"uplink1": {Slot: 1, Mark: 0x100}}, nil, 0xff00))
		in, eg := UplinkMember{Slot: 1, Addr: ext4}, UplinkMember{Slot: 1, Addr: ctrA, Egress: true}
		apply := func(what string, ch Change) {
			t.Helper()
			before := tb.c.commits
			must(t, tb.Apply(ch))
			if n := tb.c.commits - before; n != 1 {
				t.Errorf("%s took %d transactions, want 1", what, n)
			}
		}
		must(t, tb.Ensure())
		apply("the adding change", Change{
			Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true},
			UplinkAdd: []UplinkMember{in, eg}, EnsureBase: true,
		})
		st, err := tb.ReadUplinks(0xff00)
		must(t, err)
		if got := st.Members[1]; !slices.Contains(got, in) || !slices.Contains(got, eg) || len(got) != 2 {
			t.Errorf("after Apply slot 1 holds %v, want %v and %v", got, in, eg)
		}
		gone := UplinkMember{Slot: 1, Addr: ext4b}
		apply("the removing change", Change{Ingress: map[netip.Addr][]netip.Addr{ext4: nil}, UplinkDel: []UplinkMember{in, eg, gone}})
		if st, err = tb.ReadUplinks(0xff00); err != nil || len(st.Members[1]) != 0 {
			t.Errorf("after the removing Apply slot 1 holds %v (%v), want nothing", st.Members[1], err)
		}
		if nst, err := tb.Read(); err != nil || len(nst.Ingress[ext4]) != 0 {
			t.Errorf("after the removing Apply %s is steered to %v (%v), want nowhere", ext4, nst.Ingress[ext4], err)
		}
	})
}
