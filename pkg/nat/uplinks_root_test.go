package nat

import (
	"maps"
	"testing"

	"github.com/google/nftables"
)

// countingReader counts the round trips of each kind of read.
type countingReader struct {
	reader
	sets, elements int
}

func (c *countingReader) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	c.sets++
	return c.reader.GetSets(t)
}

func (c *countingReader) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	c.elements++
	return c.reader.GetSetElements(s)
}

// Every routed ADD and DEL reads which uplink has which slot: that is
// one read of the map (it was a listing of the table's sets, then the
// map), and a node with no map or no table yet still reads as none.
func TestUplinksIsOneReadOfTheMap(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		c := &countingReader{reader: tb.r}
		tb.r = c
		for _, step := range []string{"no table", "marked"} {
			if step == "marked" {
				want := map[string]UplinkSlot{"uplink1": {Slot: 2}}
				must(t, tb.SetUplinks(want, nil, 0xff00))
				c.sets, c.elements = 0, 0
				got, err := tb.Uplinks()
				if err != nil || !maps.Equal(got, want) {
					t.Fatalf("Uplinks = %v, %v; want %v", got, err, want)
				}
				if c.sets+c.elements != 1 {
					t.Errorf("Uplinks made %d set listings and %d element reads; want 1 read in all", c.sets, c.elements)
				}
				// The last slot gone: the table stays, without the map.
				must(t, tb.SetUplinks(nil, want, 0xff00))
				if got, err := tb.Uplinks(); err != nil || len(got) != 0 {
					t.Errorf("the map gone: Uplinks = %v, %v; want none", got, err)
				}
				continue
			}
			got, err := tb.Uplinks()
			if err != nil || len(got) != 0 {
				t.Errorf("%s: Uplinks = %v, %v; want none", step, got, err)
			}
		}
	})
}
