package intervals

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// pairs reads "src>dst" pairs.
func pairs(ss ...string) []Pair {
	var out []Pair
	for _, s := range ss {
		src, dst, _ := strings.Cut(s, ">")
		out = append(out, Pair{netip.MustParsePrefix(src), netip.MustParsePrefix(dst)})
	}
	return out
}

func TestDisjointServesTheSameFlowsWithNoTwoElementsOverlapping(t *testing.T) {
	for _, c := range []struct {
		in   []Pair
		want string
	}{
		{pairs("10.88.0.5/24>10.96.0.0/12", "10.88.0.6/24>10.96.0.0/12"), "[{10.88.0.0/24 10.96.0.0/12}]"},
		{pairs("10.88.0.0/24>10.96.0.0/12", "10.88.0.0/24>10.96.1.0/24"), "[{10.88.0.0/24 10.96.0.0/12}]"},
		{pairs("10.88.0.0/24>10.96.0.0/12", "10.89.0.0/24>10.96.0.0/12", "fd00::/64>fd10::/108"),
			"[{10.88.0.0/24 10.96.0.0/12} {10.89.0.0/24 10.96.0.0/12} {fd00::/64 fd10::/108}]"},
		// A /23 excluding a /25 beside a /24 inside it excluding a /24
		// around that /25: the /24's pair is cut around the /23's.
		{pairs("10.88.0.0/23>10.96.0.0/25", "10.88.0.0/24>10.96.0.0/24"),
			"[{10.88.0.0/23 10.96.0.0/25} {10.88.0.0/24 10.96.0.128/25}]"},
		{nil, "[]"},
	} {
		got := Disjoint(c.in)
		if fmt.Sprint(got) != c.want {
			t.Errorf("Disjoint(%v) = %v, want %s", c.in, got, c.want)
		}
		for i, p := range got {
			for _, q := range got[i+1:] {
				if p.overlaps(q) {
					t.Errorf("Disjoint(%v): %v overlaps %v", c.in, p, q)
				}
			}
		}
		for _, p := range c.in {
			if !Served(got, p) {
				t.Errorf("Disjoint(%v) = %v does not serve %v", c.in, got, p)
			}
		}
	}
}

func TestServedTellsWhetherEveryFlowOfAPairIsHeld(t *testing.T) {
	held := pairs("10.88.0.0/23>10.96.0.0/25", "10.88.0.0/24>10.96.0.128/25")
	for _, c := range []struct {
		p    string
		want bool
	}{
		{"10.88.0.0/24>10.96.0.0/24", true}, // across both elements
		{"10.88.0.5/32>10.96.0.7/32", true},
		{"10.88.1.0/24>10.96.0.0/24", false}, // its upper half is not held
		{"10.88.0.0/24>10.97.0.0/24", false},
		{"fd00::/64>fd10::/108", false},
	} {
		if got := Served(held, pairs(c.p)[0]); got != c.want {
			t.Errorf("Served(%v, %s) = %v, want %v", held, c.p, got, c.want)
		}
	}
}

func TestPlanChangesNothingWhenTheSetServesExactlyWhatIsWanted(t *testing.T) {
	held := pairs("10.88.0.0/23>10.96.0.0/25", "10.88.0.0/24>10.96.0.128/25")
	if add, del := Plan(held, pairs("10.88.0.0/24>10.96.0.0/24", "10.88.0.0/23>10.96.0.0/25")); add != nil || del != nil {
		t.Errorf("a set that serves what is wanted, cut otherwise, planned +%v -%v", add, del)
	}
	add, del := Plan(held, pairs("10.88.0.0/23>10.96.0.0/25", "10.89.0.0/24>10.96.0.0/12"))
	if fmt.Sprint(add) != "[{10.89.0.0/24 10.96.0.0/12}]" || fmt.Sprint(del) != "[{10.88.0.0/24 10.96.0.128/25}]" {
		t.Errorf("Plan = +%v -%v, want the /24's element in place of the cut one", add, del)
	}
}

func TestMergeRemovesOnlyWhatTheSetHoldsAndAddsOnlyWhatItLacks(t *testing.T) {
	held := pairs("10.77.0.0/24>10.77.0.0/24", "10.78.0.0/24>10.78.0.0/24")
	for _, c := range []struct {
		what          string
		del, add      []Pair
		wantAdd, wDel string
	}{
		{"a subnet a held one covers", nil, pairs("10.77.0.5/32>10.77.0.5/32"), "[]", "[]"},
		{"a subnet around a held one", nil, pairs("10.77.0.0/16>10.77.0.0/16"), "[{10.77.0.0/16 10.77.0.0/16}]", "[{10.77.0.0/24 10.77.0.0/24}]"},
		{"a removal of one not held", pairs("10.79.0.0/24>10.79.0.0/24"), nil, "[]", "[]"},
		{"a removal and an addition", pairs("10.78.0.0/24>10.78.0.0/24"), pairs("10.78.1.0/24>10.78.1.0/24"),
			"[{10.78.1.0/24 10.78.1.0/24}]", "[{10.78.0.0/24 10.78.0.0/24}]"},
	} {
		add, del := Merge(held, c.del, c.add)
		if fmt.Sprint(add) != c.wantAdd || fmt.Sprint(del) != c.wDel {
			t.Errorf("%s: Merge = +%v -%v, want +%s -%s", c.what, add, del, c.wantAdd, c.wDel)
		}
	}
}
