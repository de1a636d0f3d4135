package nat

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
)

// pairs reads "src>dst" pairs.
func pairs(ss ...string) []intervals.Pair {
	var out []intervals.Pair
	for _, s := range ss {
		src, dst, _ := strings.Cut(s, ">")
		out = append(out, intervals.Pair{Src: netip.MustParsePrefix(src), Dst: netip.MustParsePrefix(dst)})
	}
	return out
}

func readExcluded(t *testing.T, tb *Table) []intervals.Pair {
	t.Helper()
	st, err := tb.Read()
	must(t, err)
	return st.Excluded
}

// The common ADD is of a network whose exclusion elements the sets hold
// already: its transaction adds them again, and the kernel takes it as it
// is, the first time, with no read and no merge (the kernel keeps an
// element it holds and rebuilds nothing for it).
func TestAnAddOfHeldExclusionElementsIsTakenAtOnce(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		held := pairs("10.88.0.0/24>10.96.0.0/12", "10.88.0.0/24>10.244.0.0/16", "fd00:88::/64>fd00:96::/108")
		must(t, tb.Apply(Change{Exclude: held}))
		refused, err := tb.commit(Change{Exclude: held})
		must(t, err)
		if refused != nil {
			t.Fatalf("the kernel refused elements it holds (%v): every ADD of the network would read the sets and merge", refused)
		}
		if got := fmt.Sprint(readExcluded(t, tb)); got != fmt.Sprint(held) {
			t.Errorf("the sets hold %s, want %v", got, held)
		}
	})
}

// Networks whose container subnets nest (a network widened, a /32 inside
// another's subnet) may list destinations that nest the other way: the
// sets refuse an overlapping element, so the change merges them, in one
// transaction, and the sets still serve every flow each network excludes.
func TestNestedExclusionElementsMergeInOneChange(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		var all []intervals.Pair
		for _, s := range []string{"10.88.0.0/24>10.96.0.0/12", "10.88.0.5/32>10.96.0.0/16", "10.88.0.0/16>10.96.0.0/24", "10.89.0.0/24>10.244.0.0/16"} {
			p := pairs(s)
			all = append(all, p...)
			must(t, tb.Apply(Change{Exclude: p}))
			got := readExcluded(t, tb)
			for _, w := range all {
				if !intervals.Served(got, w) {
					t.Fatalf("after adding %s the sets hold %v, which do not serve %v", s, got, w)
				}
			}
			if extra := intervals.Disjoint(append(all, got...)); fmt.Sprint(extra) != fmt.Sprint(intervals.Disjoint(all)) {
				t.Fatalf("after adding %s the sets hold %v, which serve more than %v", s, got, all)
			}
		}
		must(t, tb.Apply(Change{DelExclude: readExcluded(t, tb)}))
		if got := readExcluded(t, tb); len(got) != 0 {
			t.Errorf("after removing every element the sets hold %v", got)
		}
	})
}
