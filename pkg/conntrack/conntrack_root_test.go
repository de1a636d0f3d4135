package conntrack

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

// ctCase is one family's addresses for the filtered-dump test.
type ctCase struct {
	ext, extOther, ctrA, ctrB, client, other netip.Addr
	far                                      func(i int) netip.Addr // unrelated servers
}

var ctCases = map[string]ctCase{
	"IPv4": {ext4, ext4b, ctrA, ctrB, netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"),
		func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}) }},
	"IPv6": {ext6, netip.MustParseAddr("2001:db8:1::11"), ctrA6, ctrB6,
		netip.MustParseAddr("2001:db8:2::7"), netip.MustParseAddr("2001:db8:2::8"),
		func(i int) netip.Addr { return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 3, 15: byte(i)}) }},
}

const unrelatedFlows = 200

// For IPv4 the kernel, not forget, must do the picking: with the filter
// dropped a dump returns the 200 unrelated entries too and the dump checks
// fail, while the Forget checks alone would pass on the Go-side guard. For
// both families the kernel picks by NAT status (IPv6 by that alone, see
// kernelFilters): a status dump returns only the DNATed entries.
//
// forget dumps the whole family once when the namespace has few entries
// and once per filter when it has many; the count is made to say which.
func TestFilteredDumpsReturnOnlyTheIPsEntriesAndForgetLeavesTheRest(t *testing.T) {
	for name, c := range ctCases {
		for _, many := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/many=%v", name, many), func(t *testing.T) {
				inNetNS(t, func() {
					count := map[bool]int{false: smallTable, true: smallTable + 1}[many]
					ct := c.withFlows(t, count)
					if kernelFilters(ctFamily(c.ext)) {
						c.checkDumps(t, ct)
					}
					c.checkStatusDump(t, ct)
					c.checkForgets(t, ct, map[bool]int{false: 1, true: 2}[many])
				})
			})
		}
	}
}

// With no entry in the namespace there is nothing to forget, and no dump
// walks the kernel's whole conntrack hash to find that out.
func TestForgetDumpsNothingWhenTheNamespaceHasNoEntries(t *testing.T) {
	inNetNS(t, func() {
		ct, err := Open()
		must(t, err)
		defer ct.Close()
		for _, ip := range []netip.Addr{ext4, ext6} {
			n, err := ct.ForgetIP(ip)
			must(t, err)
			if _, err := ct.ForgetTarget(ip, ctrA); err != nil {
				t.Fatal(err)
			}
			if n != 0 || ct.dumps != 0 {
				t.Errorf("forgetting %s in an empty namespace deleted %d entries in %d dumps, want none in none", ip, n, ct.dumps)
			}
		}
		createFlows(t, ctCases["IPv4"].matching())
		if _, err := ct.ForgetIP(ext4); err != nil || ct.dumps != 1 {
			t.Errorf("with 4 entries ForgetIP made %d dumps (%v), want one", ct.dumps, err)
		}
	})
}

// In a pass (StartPass) an identical request walks the hash once: an IPv6
// dump is filtered by status alone, so forgetting two targets takes one
// walk where it took two; an IPv4 one by address too, so each target
// keeps its own. Each pass starts afresh: a flow made after a pass's walk
// is found by the next pass. Either way the targets' entries go and the
// unrelated ones stay.
func TestAPassWalksOnceForIdenticalRequests(t *testing.T) {
	for name, c := range ctCases {
		t.Run(name, func(t *testing.T) {
			inNetNS(t, func() {
				ct := c.withFlows(t, smallTable+1)
				ct.StartPass()
				for _, target := range []netip.Addr{c.ctrA, c.ctrB} {
					if _, err := ct.ForgetTarget(c.ext, target); err != nil {
						t.Fatal(err)
					}
				}
				want := map[bool]int{true: 2, false: 1}[kernelFilters(ctFamily(c.ext))]
				if ct.dumps != want {
					t.Errorf("forgetting two targets of %s in one pass took %d walks, want %d", c.ext, ct.dumps, want)
				}
				createFlows(t, []*netlink.ConntrackFlow{ctFlow(c.client, c.ext, c.ctrA, c.client, 1004)})
				ct.StartPass()
				n, err := ct.ForgetTarget(c.ext, c.ctrA)
				must(t, err)
				if n != 1 {
					t.Errorf("the next pass deleted %d entries, want the one made after the first pass's walk", n)
				}
				left, err := netlink.ConntrackTableList(netlink.ConntrackTable, netlink.InetFamily(ctFamily(c.ext)))
				must(t, err)
				// The egress entry (SNATed, port 1002) is no target's.
				if len(left) != unrelatedFlows+1 {
					t.Errorf("left %d entries, want the %d unrelated ones and the egress one", len(left), unrelatedFlows)
				}
				for _, f := range left {
					if f.Forward.SrcPort < 2000 && f.Forward.SrcPort != 1002 {
						t.Errorf("left an entry DNATed from %s: %v", c.ext, f)
					}
				}
			})
		})
	}
}

// withFlows makes the case's unrelated and matching flows in the current
// namespace and a conntrack socket, closed with the test, that reads the
// namespace as holding count entries (which picks forget's dumps).
func (c ctCase) withFlows(t *testing.T, count int) *Conn {
	t.Helper()
	createFlows(t, c.unrelated())
	createFlows(t, c.matching())
	ct, err := Open()
	must(t, err)
	t.Cleanup(func() { ct.Close() })
	ct.entries = func() (int, error) { return count, nil }
	return ct
}

// unrelated flows share an address with some filter (an orig destination,
// a reply source) but never all of one, so only the kernel's AND drops them.
func (c ctCase) unrelated() []*netlink.ConntrackFlow {
	var flows []*netlink.ConntrackFlow
	for i := range unrelatedFlows {
		dst, replySrc := c.far(i), c.far(i)
		switch i % 3 {
		case 0: // to another external IP, DNATed to A
			dst, replySrc = c.extOther, c.ctrA
		case 1: // straight to A
			dst, replySrc = c.ctrA, c.ctrA
		}
		flows = append(flows, ctFlow(c.client, dst, replySrc, c.client, uint16(2000+i)))
	}
	return flows
}

func (c ctCase) matching() []*netlink.ConntrackFlow {
	return []*netlink.ConntrackFlow{
		ctFlow(c.client, c.ext, c.ctrA, c.client, 1000), // to A via ext
		ctFlow(c.client, c.ext, c.ctrB, c.client, 1001), // to B via ext
		ctFlow(c.ctrA, c.other, c.other, c.ext, 1002),   // A's egress SNATed to ext
		ctFlow(c.ctrB, c.ext, c.ctrA, c.ext, 1003),      // B to ext, hairpinned to A: both to and from ext
	}
}

func (c ctCase) checkDumps(t *testing.T, ct *Conn) {
	t.Helper()
	for _, d := range []struct {
		ff   flowFilter
		want []string
	}{
		{flowFilter{origDst: c.ext, replySrc: c.ctrA}, c.describe([4]bool{true, false, false, true})},
		{flowFilter{origDst: c.ext}, c.describe([4]bool{true, true, false, true})},
		{flowFilter{replyDst: c.ext}, c.describe([4]bool{false, false, true, true})},
	} {
		flows, err := ct.dump(ctFamily(c.ext), d.ff)
		must(t, err)
		if got := describeFlows(flows); !slices.Equal(got, d.want) {
			t.Errorf("dump by orig dst %v, reply src %v, reply dst %v returned %d entries, want only %v (is the kernel filtering?): %v",
				d.ff.origDst, d.ff.replySrc, d.ff.replyDst, len(got), d.want, firstFew(got))
		}
	}
}

// checkStatusDump asks the kernel for the DNATed entries alone: the
// unrelated ones DNATed to A and the matching ones but the egress one.
func (c ctCase) checkStatusDump(t *testing.T, ct *Conn) {
	t.Helper()
	flows, err := ct.dump(ctFamily(c.ext), flowFilter{status: ipsDstNAT})
	must(t, err)
	want := (unrelatedFlows+2)/3 + 3
	if len(flows) != want {
		t.Errorf("a dump by status DST_NAT returned %d entries, want the %d DNATed ones (is the kernel filtering by status?): %v",
			len(flows), want, firstFew(describeFlows(flows)))
	}
}

func (c ctCase) checkForgets(t *testing.T, ct *Conn, wantDumps int) {
	t.Helper()
	// The hairpinned entry is in both of ForgetIP's dumps: it must come once.
	before := ct.dumps
	flows, err := ct.matching(ctFamily(c.ext), []flowFilter{{origDst: c.ext, status: ipsDstNAT}, {replyDst: c.ext, status: ipsSrcNAT}})
	must(t, err)
	if got := ct.dumps - before; got != wantDumps {
		t.Errorf("ForgetIP's listing took %d dumps, want %d", got, wantDumps)
	}
	if got, want := describeFlows(flows), c.describe([4]bool{true, true, true, true}); !slices.Equal(got, want) {
		t.Errorf("ForgetIP would delete %v, want %v, each once", firstFew(got), want)
	}
	n, err := ct.ForgetTarget(c.ext, c.ctrB)
	must(t, err)
	if n != 1 {
		t.Errorf("ForgetTarget deleted %d entries, want the one DNATed to %s", n, c.ctrB)
	}
	n, err = ct.ForgetIP(c.ext)
	must(t, err)
	if n != 3 {
		t.Errorf("ForgetIP deleted %d entries, want A's, the egress one and the hairpinned one", n)
	}
	left, err := netlink.ConntrackTableList(netlink.ConntrackTable, netlink.InetFamily(ctFamily(c.ext)))
	must(t, err)
	if len(left) != unrelatedFlows {
		t.Errorf("left %d entries, want the %d unrelated ones", len(left), unrelatedFlows)
	}
	for _, f := range left {
		if f.Forward.SrcPort < 2000 {
			t.Errorf("left an entry of %s: %v", c.ext, f)
		}
	}
}

// describe names the matching flows picked, as describeFlows reads them.
func (c ctCase) describe(pick [4]bool) []string {
	var want []string
	for i, f := range c.matching() {
		if pick[i] {
			want = append(want, fmt.Sprintf("%s>%s %s>%s", f.Forward.SrcIP, f.Forward.DstIP, f.Reverse.SrcIP, f.Reverse.DstIP))
		}
	}
	slices.Sort(want)
	return want
}

func describeFlows(flows []flow) []string {
	var got []string
	for _, f := range flows {
		src, _ := parseTuple(f.orig)
		got = append(got, fmt.Sprintf("%s>%s %s>%s", src, f.origDst, f.replySrc, f.replyDst))
	}
	slices.Sort(got)
	return got
}

func firstFew(s []string) []string { return s[:min(len(s), 5)] }
