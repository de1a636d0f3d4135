package nat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"golang.org/x/sys/unix"
)

var nsSeq atomic.Int64

// inNetNS runs f in a fresh network namespace, with a Table opened there;
// the returned name is for `ip netns exec`.
func inNetNS(t *testing.T, f func(name string, tb *Table)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and nftables tables")
	}
	name := fmt.Sprintf("eipnat-%d-%d", os.Getpid(), nsSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	netns, err := ns.GetNS("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	if err := netns.Do(func(ns.NetNS) error {
		tb, err := Open()
		if err != nil {
			return err
		}
		defer tb.Close()
		f(name, tb)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func nft(t *testing.T, netns string, args ...string) string {
	t.Helper()
	return run(t, append([]string{"ip", "netns", "exec", netns, "nft"}, args...)...)
}

var (
	ext4, ext4b = netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	ext6        = netip.MustParseAddr("2001:db8:1::10")
	ctrA, ctrB  = netip.MustParseAddr("10.88.0.5"), netip.MustParseAddr("10.88.0.6")
	ctrA6       = netip.MustParseAddr("fd00:88::5")
	ctrB6       = netip.MustParseAddr("fd00:88::6")
	sub4        = netip.MustParsePrefix("10.88.0.0/24")
	sub6        = netip.MustParsePrefix("fd00:88::/64")
)

// ensureApart makes the table on a connection of its own: the Table
// under test then did not make it, and reads Seen from the sets alone (a
// call that made the table reads every address as seen).
func ensureApart(t *testing.T) {
	t.Helper()
	other, err := Open()
	must(t, err)
	defer other.Close()
	must(t, other.Ensure())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func steerAll(t *testing.T, tb *Table) {
	t.Helper()
	must(t, tb.SetIngress(ext4, []netip.Addr{ctrA}))
	must(t, tb.SetIngress(ext4b, []netip.Addr{ctrA, ctrB}))
	must(t, tb.SetIngress(ext6, []netip.Addr{ctrB6, ctrA6}))
	must(t, tb.SetEgress(EgressKey{ctrA, "uplink0"}, ext4))
	must(t, tb.SetEgress(EgressKey{ctrA6, "uplink0"}, ext6))
	must(t, tb.SetHairpin(sub4))
	must(t, tb.SetHairpin(sub6))
	must(t, tb.Apply(Change{Exclude: []intervals.Pair{{Src: sub4, Dst: svc4}, {Src: sub6, Dst: svc6}}}))
}

// The Service CIDRs steerAll's containers' flows are never SNATed to.
var svc4, svc6 = netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")

func TestSteeringReadsBackFromTheKernelAndFromNft(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		steerAll(t, tb)
		st, err := tb.Read()
		must(t, err)
		want := map[netip.Addr][]netip.Addr{ext4: {ctrA}, ext4b: {ctrA, ctrB}, ext6: {ctrB6, ctrA6}}
		if fmt.Sprint(st.Ingress) != fmt.Sprint(want) {
			t.Errorf("ingress read back as %v, want %v", st.Ingress, want)
		}
		if st.Egress[EgressKey{ctrA, "uplink0"}] != ext4 || st.Egress[EgressKey{ctrA6, "uplink0"}] != ext6 || len(st.Egress) != 2 {
			t.Errorf("egress read back as %v", st.Egress)
		}
		if fmt.Sprint(st.Hairpin) != fmt.Sprint([]netip.Prefix{sub4, sub6}) || len(st.Broken) != 0 || len(st.Stray) != 0 || !st.Present {
			t.Errorf("read back hairpins %v, broken %v, stray %v, present %v", st.Hairpin, st.Broken, st.Stray, st.Present)
		}
		if got, want := fmt.Sprint(st.Excluded), "[{10.88.0.0/24 10.96.0.0/12} {fd00:88::/64 fd00:96::/108}]"; got != want {
			t.Errorf("exclusions read back as %s, want %s", got, want)
		}
		js := nft(t, netns, "-j", "list", "table", "inet", TableName)
		for _, a := range []netip.Addr{ext4, ext4b, ext6, ctrA, ctrB, ctrA6, ctrB6} {
			if !strings.Contains(js, `"`+a.String()+`"`) {
				t.Errorf("nft -j list table does not name %s:\n%s", a, js)
			}
		}
		text := nft(t, netns, "list", "table", "inet", TableName)
		for _, line := range []string{
			"type nat hook prerouting priority dstnat - 10; policy accept;",
			"type nat hook output priority -110; policy accept;",
			"type nat hook postrouting priority srcnat - 10; policy accept;",
			"\t\tip daddr vmap @in4 comment \"external-ip layout 6\"\n",
			"\t\tip6 daddr vmap @in6 comment \"external-ip layout 6\"\n",
			"ct status dnat ip saddr . ip daddr @hp4 ct original ip daddr @ext4 masquerade comment \"external-ip layout 6\"",
			"ct status dnat ip6 saddr . ip6 daddr @hp6 ct original ip6 daddr @ext6 masquerade comment \"external-ip layout 6\"",
			"elements = { 192.0.2.10, 192.0.2.11 }",
			"\t\tip saddr . ip daddr != @nosnat4 add @seen4 { ip saddr } snat ip to ip saddr . oifname map @snat4 comment \"external-ip layout 6\"\n",
			"\t\tip6 saddr . ip6 daddr != @nosnat6 add @seen6 { ip6 saddr } snat ip6 to ip6 saddr . oifname map @snat6 comment \"external-ip layout 6\"\n",
			"\t\tct state new ip saddr . ip daddr != @nosnat4 ip saddr vmap @uplink-eg4 comment \"external-ip layout 6\"\n",
			"\t\tct state new ip6 saddr . ip6 daddr != @nosnat6 ip6 saddr vmap @uplink-eg6 comment \"external-ip layout 6\"\n",
			"\t\tip daddr @ext4 add @seen4 { ip daddr } comment \"external-ip layout 6\"\n",
			"\t\tip6 daddr @ext6 add @seen6 { ip6 daddr } comment \"external-ip layout 6\"\n",
			"192.0.2.11 : goto to-192.0.2.11",
			"192.0.2.10 : 10.88.0.5",
			"\t\tdnat ip to ip daddr map @dnat4 comment \"external-ip layout 6\"\n",
			"\t\tdnat ip6 to ip6 daddr map @dnat6 comment \"external-ip layout 6\"\n",
			"dnat ip to numgen inc mod 2 map @sp-192.0.2.11",
			"elements = { 0x00000000 : 10.88.0.5, 0x00000001 : 10.88.0.6 }",
			"dnat ip6 to numgen inc mod 2 map @sp-2001-db8-1--10",
			"elements = { 0x00000000 : fd00:88::6, 0x00000001 : fd00:88::5 }",
			`10.88.0.5 . "uplink0" : 192.0.2.10`,
			"10.88.0.0/24 . 10.88.0.0/24",
			"fd00:88::/64 . fd00:88::/64",
			"10.88.0.0/24 . 10.96.0.0/12",
			"fd00:88::/64 . fd00:96::/108",
		} {
			if !strings.Contains(text, line) {
				t.Errorf("nft list table lacks %q:\n%s", line, text)
			}
		}
	})
}

func TestEveryChangeIsIdempotentAndRemovalLeavesNothing(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		steerAll(t, tb)
		steerAll(t, tb) // a journal replay applies a change again
		for range 2 {
			must(t, tb.SetIngress(ext4, nil))
			must(t, tb.SetIngress(ext4b, nil))
			must(t, tb.SetIngress(ext6, nil))
			must(t, tb.DelEgress(EgressKey{ctrA, "uplink0"}))
			must(t, tb.DelEgress(EgressKey{ctrA6, "uplink0"}))
			must(t, tb.DelHairpin(sub4))
			must(t, tb.DelHairpin(sub6))
		}
		st, err := tb.Read()
		must(t, err)
		if len(st.Ingress)+len(st.Egress)+len(st.Hairpin)+len(st.Stray)+len(st.Broken) != 0 {
			t.Errorf("after removing everything the table still has %+v", st)
		}
		if text := nft(t, netns, "list", "table", "inet", TableName); strings.Contains(text, "to-") {
			t.Errorf("an ingress chain outlived its IP:\n%s", text)
		}
	})
}

func TestRemovalOnAMissingTableIsNoErrorAndCreatesNothingButTheTable(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.DelEgress(EgressKey{ctrA, "uplink0"}))
		must(t, tb.DelHairpin(sub4))
		if st, err := tb.Read(); err != nil || st.Present {
			t.Errorf("removals made the table (present %v, err %v)", st.Present, err)
		}
		must(t, tb.SetIngress(ext4, nil))
		st, err := tb.Read()
		must(t, err)
		if len(st.Ingress) != 0 || len(st.Broken) != 0 {
			t.Errorf("removing steering of an unknown IP left %+v", st)
		}
	})
}

func TestEgressOfASourceMovesToAnotherIPAndIngressTargetsChange(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.SetEgress(EgressKey{ctrA, "uplink0"}, ext4))
		must(t, tb.SetEgress(EgressKey{ctrA, "uplink0"}, ext4b))
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA, ctrB}))
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrB}))
		st, err := tb.Read()
		must(t, err)
		if got := st.Egress[EgressKey{ctrA, "uplink0"}]; got != ext4b || len(st.Egress) != 1 {
			t.Errorf("egress of %s is %v, want only %s", ctrA, st.Egress, ext4b)
		}
		if got := st.Ingress[ext4]; !slices.Equal(got, []netip.Addr{ctrB}) {
			t.Errorf("ingress of %s is %v, want [%s]", ext4, got, ctrB)
		}
	})
}

func TestReadReportsAStrayChainAndABrokenBaseChain(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA, ctrB}))
		nft(t, netns, "delete", "element", "inet", TableName, "in4", "{", ext4.String(), "}")
		nft(t, netns, "flush", "chain", "inet", TableName, chainPostrouting)
		st, err := tb.Read()
		must(t, err)
		if !slices.Equal(st.Stray, []netip.Addr{ext4}) || len(st.Ingress) != 0 {
			t.Errorf("stray %v, ingress %v: want the chain of %s reported stray", st.Stray, st.Ingress, ext4)
		}
		if len(st.Broken) != 1 || !strings.Contains(st.Broken[0], chainPostrouting) {
			t.Errorf("broken %v, want the flushed postrouting chain", st.Broken)
		}
		must(t, tb.Ensure())
		if st, _ := tb.Read(); len(st.Broken) != 0 {
			t.Errorf("Ensure left %v broken", st.Broken)
		}
	})
}

func TestProbeChangesNothing(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Probe())
		if st, _ := tb.Read(); st.Present {
			t.Error("Probe left a table behind")
		}
		steerAll(t, tb)
		before := nft(t, netns, "list", "table", "inet", TableName)
		must(t, tb.Probe())
		if after := nft(t, netns, "list", "table", "inet", TableName); after != before {
			t.Errorf("Probe changed the table:\n%s\nto\n%s", before, after)
		}
	})
}

// STATUS probes without the state lock, beside another process's ADD
// (a lock would not do: two state directories share the table). An ADD
// that makes the table between Probe's staging and its commit must keep
// its table and its rules.
func TestProbeLeavesTheTableOfAnAddCommittedBesideIt(t *testing.T) {
	inNetNS(t, func(netns string, probe *Table) {
		probe.stageProbe()
		add, err := Open() // the concurrent ADD, on its own connection
		must(t, err)
		defer add.Close()
		must(t, add.Ensure())
		must(t, add.SetIngress(netip.MustParseAddr("192.0.2.10"), []netip.Addr{netip.MustParseAddr("10.88.0.2")}))
		if err := probe.c.Flush(); err != nil {
			t.Fatalf("the probe's commit, after the ADD's: %v", err)
		}
		st, err := add.Read()
		must(t, err)
		if !st.Present || len(st.Ingress) == 0 {
			t.Errorf("the ADD's table is gone after STATUS's probe: present %v, ingress %v", st.Present, st.Ingress)
		}
	})
}

// A table named as the probe's that exists is another program's: Probe
// fails naming it, and leaves it as it was.
func TestProbeLeavesAnotherProgramsTableOfItsNameAlone(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		nft(t, netns, "add", "table", "inet", probeTable)
		nft(t, netns, "add", "chain", "inet", probeTable, "theirs")
		err := tb.Probe()
		if err == nil || !strings.Contains(err.Error(), "table inet "+probeTable+" exists") {
			t.Errorf("Probe beside another program's table of its name: %v, want the table named", err)
		}
		if out := nft(t, netns, "list", "chain", "inet", probeTable, "theirs"); !strings.Contains(out, "theirs") {
			t.Errorf("Probe changed another program's table:\n%s", out)
		}
	})
}

// An IP left out of the hairpin rule's set is not steered as we would (its
// own container could not reach it): Read says it has no targets, and
// SetIngress, as GC calls it, puts it back.
func TestAnIPMissingFromTheHairpinSetReadsAsUnsteeredUntilSetAgain(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA}))
		nft(t, netns, "delete", "element", "inet", TableName, "ext4", "{", ext4.String(), "}")
		st, err := tb.Read()
		must(t, err)
		if len(st.Ingress[ext4]) != 0 {
			t.Errorf("ingress of %s read back as %v with the IP out of ext4, want none", ext4, st.Ingress[ext4])
		}
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA}))
		if st, _ := tb.Read(); !slices.Equal(st.Ingress[ext4], []netip.Addr{ctrA}) {
			t.Errorf("SetIngress left %s steering to %v", ext4, st.Ingress[ext4])
		}
		must(t, tb.SetIngress(ext4, nil))
		if out := nft(t, netns, "list", "set", "inet", TableName, "ext4"); strings.Contains(out, ext4.String()) {
			t.Errorf("removing %s's steering left it in ext4:\n%s", ext4, out)
		}
	})
}

// A table made by a release without the hairpin set, or missing a map
// deleted by hand, reads as broken (not as an error), and Ensure (what GC
// and repair run then) mends it.
func TestATableMissingASetOrMapIsBrokenUntilEnsure(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		for _, c := range []string{chainPrerouting, chainOutput, chainPostrouting} {
			nft(t, netns, "flush", "chain", "inet", TableName, c) // the rules reading the set
		}
		nft(t, netns, "delete", "set", "inet", TableName, "ext4")
		nft(t, netns, "delete", "map", "inet", TableName, "snat4")
		nft(t, netns, "delete", "set", "inet", TableName, "seen4")
		st, err := tb.Read()
		must(t, err)
		for _, name := range []string{"ext4", "snat4", "seen4"} {
			if !slices.ContainsFunc(st.Broken, func(b string) bool { return strings.Contains(b, name) }) {
				t.Errorf("broken %v, want the missing %s named", st.Broken, name)
			}
		}
		must(t, tb.Ensure())
		if st, _ := tb.Read(); len(st.Broken) != 0 {
			t.Errorf("Ensure left %v broken", st.Broken)
		}
	})
}

// A base rule edited by hand, with as many rules as before, is broken:
// here the ingress rule with the fib guard of earlier versions (which
// would not steer an IP held as a route) and the hairpin rule reading
// another set.
func TestABaseRuleEditedByHandIsBrokenUntilEnsure(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		nft(t, netns, "flush", "chain", "inet", TableName, chainPrerouting)
		nft(t, netns, "add", "rule", "inet", TableName, chainPrerouting, "fib", "daddr", "type", "local", "ip", "daddr", "vmap", "@in4")
		nft(t, netns, "add", "rule", "inet", TableName, chainPrerouting, "fib", "daddr", "type", "local", "ip6", "daddr", "vmap", "@in6")
		nft(t, netns, "flush", "chain", "inet", TableName, chainPostrouting)
		nft(t, netns, "add", "rule", "inet", TableName, chainPostrouting, "snat", "ip", "to", "ip", "saddr", ".", "oifname", "map", "@snat4")
		nft(t, netns, "add", "rule", "inet", TableName, chainPostrouting, "snat", "ip6", "to", "ip6", "saddr", ".", "oifname", "map", "@snat6")
		nft(t, netns, "add", "rule", "inet", TableName, chainPostrouting, "ct", "status", "dnat", "ip", "saddr", ".", "ip", "daddr", "@hp4", "masquerade")
		nft(t, netns, "add", "rule", "inet", TableName, chainPostrouting, "ct", "status", "dnat", "ip6", "saddr", ".", "ip6", "daddr", "@hp6", "masquerade")
		st, err := tb.Read()
		must(t, err)
		for _, chain := range []string{chainPrerouting, chainPostrouting} {
			if !slices.ContainsFunc(st.Broken, func(b string) bool { return strings.HasPrefix(b, "chain "+chain+" ") }) {
				t.Errorf("broken %v, want chain %s named", st.Broken, chain)
			}
		}
		if len(st.Broken) != 2 || strings.Contains(strings.Join(st.Broken, ""), "\n") {
			t.Errorf("broken %q, want the two edited chains, each on one line", st.Broken)
		}
		must(t, tb.Ensure())
		if st, _ := tb.Read(); len(st.Broken) != 0 {
			t.Errorf("Ensure left %v broken", st.Broken)
		}
	})
}

// earlierIngress are the rules of prerouting and output in a table made by
// layout 1 (before route mode): the DNAT rules guarded by the fib, no tag.
var earlierIngress = []string{
	"fib daddr type local ip daddr vmap @in4",
	"fib daddr type local dnat ip to ip daddr map @dnat4",
	"fib daddr type local ip6 daddr vmap @in6",
	"fib daddr type local dnat ip6 to ip6 daddr map @dnat6",
}

// makeEarlierLayout rewrites the ingress chains of our table as an earlier
// version made them, as many rules as ours, and takes away the marker
// chain, which no earlier version made: only the marker tells.
func makeEarlierLayout(t *testing.T, netns string, tb *Table) {
	t.Helper()
	for _, chain := range []string{chainPrerouting, chainOutput} {
		nft(t, netns, "flush", "chain", "inet", TableName, chain)
		for _, r := range earlierIngress {
			nft(t, netns, append([]string{"add", "rule", "inet", TableName, chain}, strings.Fields(r)...)...)
		}
	}
	nft(t, netns, "delete", "chain", "inet", TableName, layoutChain(tb.mask()))
}

// ADD's check reads each base chain's rule count from the kernel's use
// count of the chain: a chain flushed, or given a rule by hand, reads as
// not intact, and so does a table without the marker of this layout;
// chains of the same name in another inet table count for nothing.
func TestBaseIntactReadsEachBaseChainsRuleCount(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		intact := func(want bool, after string) {
			t.Helper()
			if ok, err := tb.baseIntact(); ok != want || err != nil {
				t.Errorf("after %s: intact %v (%v), want %v", after, ok, err, want)
			}
		}
		intact(false, "nothing (no table)")
		must(t, tb.Ensure())
		intact(true, "Ensure")
		uses, err := tb.c.ChainUses()
		must(t, err)
		for _, b := range baseChains(DefaultUplinkMask) {
			if uses[b.name] != b.count {
				t.Errorf("chain %s reads use %d, want its %d rules: the check would take the slow way", b.name, uses[b.name], b.count)
			}
		}
		nft(t, netns, "add", "table", "inet", "other")
		nft(t, netns, "add", "chain", "inet", "other", chainPrerouting)
		nft(t, netns, "add", "rule", "inet", "other", chainPrerouting, "meta", "mark", "1", "accept")
		intact(true, "another table's chain of the same name got a rule")
		for _, c := range []string{chainPrerouting, chainOutput, chainPostrouting} {
			nft(t, netns, "flush", "chain", "inet", TableName, c)
			intact(false, "flushing chain "+c)
			must(t, tb.Ensure())
			intact(true, "Ensure after flushing chain "+c)
		}
		nft(t, netns, "add", "rule", "inet", TableName, chainOutput, "meta", "mark", "1", "accept")
		intact(false, "a rule added to chain output by hand")
		must(t, tb.Ensure())
		nft(t, netns, "delete", "chain", "inet", TableName, layoutChain(tb.mask()))
		intact(false, "deleting the layout's marker chain")
		must(t, tb.Ensure())
		intact(true, "Ensure after deleting the marker")
	})
}

// Ensure takes away the marker of an earlier layout, so that a table has
// one marker, this layout's.
func TestEnsureReplacesAnEarlierLayoutsMarker(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		nft(t, netns, "add", "chain", "inet", TableName, layoutPrefix+"3")
		must(t, tb.Ensure())
		uses, err := tb.c.ChainUses()
		must(t, err)
		if _, ok := uses[layoutPrefix+"3"]; ok {
			t.Errorf("after Ensure the table still has chain %s3: %v", layoutPrefix, uses)
		}
		if _, ok := uses[layoutChain(tb.mask())]; !ok {
			t.Errorf("after Ensure the table has no chain %s: %v", layoutChain(tb.mask()), uses)
		}
	})
}

// The check of an ADD that steers (EnsureBase) makes a table of the earlier
// layout anew at once, as it does a flushed chain: its fib guard would
// leave every IP held as a route unsteered until a repair.
func TestEnsureBaseMakesATableOfTheEarlierLayoutAnew(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		ensureApart(t)
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4b: {ctrB}}, Fresh: map[netip.Addr]bool{ext4b: true}}))
		if seen, err := tb.Seen(ext4b); seen || err != nil {
			t.Fatalf("%s, steered by a fresh ADD with no flow yet, reads as seen %v (%v)", ext4b, seen, err)
		}
		makeEarlierLayout(t, netns, tb)
		if ok, err := tb.baseIntact(); ok || err != nil {
			t.Fatalf("a table of the earlier layout reads as intact %v (%v), want not", ok, err)
		}
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true}, EnsureBase: true}))
		if text := nft(t, netns, "list", "table", "inet", TableName); strings.Contains(text, "fib") {
			t.Errorf("after an ADD's change the table still has the fib guard:\n%s", text)
		}
		if ok, err := tb.baseIntact(); !ok || err != nil {
			t.Errorf("after an ADD's change the base chains read as intact %v (%v), want intact", ok, err)
		}
		st, err := tb.Read()
		must(t, err)
		if len(st.Broken) != 0 || fmt.Sprint(st.Ingress[ext4]) != fmt.Sprint([]netip.Addr{ctrA}) {
			t.Errorf("after an ADD's change: broken %q, %s steered to %v; want nothing broken, %s", st.Broken, ext4, st.Ingress[ext4], ctrA)
		}
		// The earlier layout recorded no flow: every IP steered then counts
		// as having had some, so that its DEL still cleans up.
		if seen, err := tb.Seen(ext4b); !seen || err != nil {
			t.Errorf("%s, steered before the layout changed, reads as never having had a flow (%v)", ext4b, err)
		}
	})
}

// Two invocations of two networks (each under its own lock, each its own
// process) may mend the table at once: each base chain still ends with its
// rules once, not with a rule of each. The test runs itself twice as those
// processes (EIP_NAT_ENSURE_IN names the namespace).
func TestConcurrentEnsuresLeaveEachBaseChainWhole(t *testing.T) {
	if path := os.Getenv("EIP_NAT_ENSURE_IN"); path != "" {
		must(t, ns.WithNetNSPath(path, func(ns.NetNS) error { return ensureTimes(100) }))
		return
	}
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		var procs []*exec.Cmd
		for range 2 {
			c := exec.Command(os.Args[0], "-test.run=^TestConcurrentEnsuresLeaveEachBaseChainWhole$", "-test.count=1")
			c.Env = append(os.Environ(), "EIP_NAT_ENSURE_IN=/var/run/netns/"+netns)
			must(t, c.Start())
			procs = append(procs, c)
		}
		for _, c := range procs {
			must(t, c.Wait())
		}
		st, err := tb.Read()
		must(t, err)
		if len(st.Broken) != 0 {
			t.Errorf("after concurrent Ensures: %v", st.Broken)
		}
	})
}

func ensureTimes(n int) error {
	tb, err := Open()
	if err != nil {
		return err
	}
	defer tb.Close()
	for range n {
		if err := tb.Ensure(); err != nil {
			return err
		}
	}
	return nil
}

// Sets with intervals live in the kernel's pipapo backend, which rebuilds
// the whole set on every change: none of ours may grow with the
// attachments. The hairpin and exclusion sets, the only ones, hold a
// subnet's element once however many attachments it has.
func TestOnlyTheHairpinAndExclusionSetsHaveIntervalsAndHoldASubnetOnce(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		steerAll(t, tb)
		must(t, tb.SetHairpin(sub4))                                  // a second target in A's subnet
		must(t, tb.SetHairpin(netip.MustParsePrefix("10.88.0.6/24"))) // named by an address of it
		second := netip.MustParsePrefix("10.88.0.6/24")               // a second attachment's, as its record has it
		must(t, tb.Apply(Change{Exclude: []intervals.Pair{{Src: second.Masked(), Dst: svc4}, {Src: sub6, Dst: svc6}}}))
		var out struct {
			Nftables []struct {
				Set *struct {
					Name  string
					Flags []string
					Elem  []any
				}
			}
		}
		must(t, json.Unmarshal([]byte(nft(t, netns, "-j", "list", "table", "inet", TableName)), &out))
		seen := 0
		for _, o := range out.Nftables {
			if o.Set == nil || !slices.Contains(o.Set.Flags, "interval") {
				continue
			}
			seen++
			if !slices.Contains([]string{ipv4.hp, ipv6.hp, ipv4.nosnat, ipv6.nosnat}, o.Set.Name) {
				t.Errorf("set %s has intervals; only the hairpin and exclusion sets may", o.Set.Name)
			}
			if len(o.Set.Elem) != 1 {
				t.Errorf("set %s holds %d elements, want its one subnet: %v", o.Set.Name, len(o.Set.Elem), o.Set.Elem)
			}
		}
		if seen != 4 {
			t.Errorf("found %d sets with intervals, want hp4, hp6, nosnat4 and nosnat6", seen)
		}
	})
}

// A new IP's change (Fresh), made with additions only
// (TestAFreshIPsChangeSendsNoDeletion), reads back as SetIngress makes
// it, and a second holder's rewrite of it is taken.
func TestAFreshIngressOnlyAddsAndReadsBackAsAnyOther(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		first, err := Open()
		must(t, err)
		defer first.Close()
		must(t, first.Apply(Change{
			Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true},
			Egress: map[EgressKey]netip.Addr{{ctrA, "uplink0"}: ext4}, Hairpin: []netip.Prefix{sub4},
		}))
		st, err := tb.Read()
		must(t, err)
		if !slices.Equal(st.Ingress[ext4], []netip.Addr{ctrA}) || len(st.Broken)+len(st.Stray) != 0 || st.Egress[EgressKey{ctrA, "uplink0"}] != ext4 {
			t.Errorf("the fresh change read back as %+v", st)
		}
		if text := nft(t, netns, "list", "table", "inet", TableName); strings.Contains(text, ingressChain(ext4)) || !strings.Contains(text, "192.0.2.10 : 10.88.0.5") {
			t.Errorf("a fresh IP with one target is not just its dnat4 element:\n%s", text)
		}
		second, err := Open()
		must(t, err)
		defer second.Close()
		must(t, second.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA, ctrB}}}))
		if st, err = tb.Read(); err != nil || !slices.Equal(st.Ingress[ext4], []netip.Addr{ctrA, ctrB}) {
			t.Errorf("the second holder's rewrite read back as %+v, %v", st, err)
		}
	})
}

// Removing an IP with one target (the DEL of its only holder) stages
// nothing for a spread chain and map it cannot have: the kernel gives
// every chain and set made in the table a handle, so a chain probed
// before and after the removal gets consecutive handles only if nothing
// was made in between. A spread's removal still takes its chain and map.
func TestRemovingAnIPWithOneTargetMakesNoChainOrSet(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA}))
		before := probeHandle(t, netns, "probe1")
		must(t, tb.SetIngress(ext4, nil))
		if after := probeHandle(t, netns, "probe2"); after != before+1 {
			t.Errorf("the removal made %d chains or sets (handles %d then %d), want none", after-before-1, before, after)
		}
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA, ctrB}))
		must(t, tb.SetIngress(ext4, nil))
		ext, err := reading{tab: tb}.extIPs(ipv4)
		must(t, err)
		if text := nft(t, netns, "list", "table", "inet", TableName); strings.Contains(text, ingressChain(ext4)) || strings.Contains(text, "192.0.2.10 :") || ext[ext4] {
			t.Errorf("a spread IP's removal left its chain or elements:\n%s", text)
		}
	})
}

// probeHandle adds an empty chain named name to our table and returns the
// handle the kernel gave it.
func probeHandle(t *testing.T, netns, name string) int {
	t.Helper()
	out := nft(t, netns, "-e", "-a", "add", "chain", "inet", TableName, name)
	_, h, ok := strings.Cut(out, "# handle ")
	h, _, _ = strings.Cut(h, "\n")
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if !ok || err != nil {
		t.Fatalf("no handle in %q", out)
	}
	return n
}

// An IP moves between one target (its dnat4 element) and several (its
// chain and spread map) and back, each form replacing the other; a spread
// rule whose modulus no longer matches its map reads as no target.
func TestAnIPMovesBetweenOneTargetAndASpreadAndReadsBackEachTime(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		for _, want := range [][]netip.Addr{{ctrA}, {ctrA, ctrB}, {ctrB}, {ctrB, ctrA}, {ctrA}} {
			must(t, tb.SetIngress(ext4, want))
			st, err := tb.Read()
			must(t, err)
			if !slices.Equal(st.Ingress[ext4], want) || len(st.Stray)+len(st.Broken) != 0 {
				t.Errorf("steered to %v, read back %v (stray %v, broken %v)", want, st.Ingress[ext4], st.Stray, st.Broken)
			}
		}
		must(t, tb.SetIngress(ext4, []netip.Addr{ctrA, ctrB}))
		nft(t, netns, "delete", "element", "inet", TableName, spreadPrefix+chainSuffix(ext4), "{", "0x00000001", "}")
		if st, _ := tb.Read(); len(st.Ingress[ext4]) != 0 {
			t.Errorf("a spread of modulus 2 over a map of 1 target read back as %v", st.Ingress[ext4])
		}
	})
}

// Our rules record an external IP as its first flow passes them, before
// they DNAT it, and a container address as its flow is SNATed; an IP that
// had no flow is not recorded, and Unsee forgets both.
func TestTheRulesRecordWhatHadAFlow(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		src := netip.MustParseAddr("10.88.0.1")
		ensureApart(t)
		must(t, tb.Apply(Change{
			Ingress:    map[netip.Addr][]netip.Addr{ext4: {ctrA}, ext4b: {ctrB}},
			Fresh:      map[netip.Addr]bool{ext4: true, ext4b: true},
			Egress:     map[EgressKey]netip.Addr{{src, "v0"}: ext4},
			EnsureBase: true,
		}))
		for _, args := range [][]string{
			{"link", "add", "v0", "type", "veth", "peer", "name", "v1"},
			{"addr", "add", src.String() + "/24", "dev", "v0"},
			{"link", "set", "v0", "up"}, {"link", "set", "v1", "up"},
			{"route", "add", "192.0.2.0/24", "dev", "v0"},
		} {
			run(t, append([]string{"ip", "-n", netns}, args...)...)
		}
		for _, a := range []netip.Addr{ext4, ext4b, src} {
			if seen, err := tb.Seen(a); seen || err != nil {
				t.Fatalf("%s reads as having had a flow before any (%v)", a, err)
			}
		}
		c, err := net.Dial("udp", netip.AddrPortFrom(ext4, 9).String())
		must(t, err)
		_, err = c.Write([]byte("x")) // DNATed to ctrA by output, SNATed back to ext4 on v0
		c.Close()
		must(t, err)
		for a, want := range map[netip.Addr]bool{ext4: true, ext4b: false, src: true} {
			if seen, err := tb.Seen(a); seen != want || err != nil {
				t.Errorf("%s had a flow: %v, read as %v (%v)", a, want, seen, err)
			}
		}
		must(t, tb.Unsee([]netip.Addr{ext4, src, ext4b}))
		for _, a := range []netip.Addr{ext4, src} {
			if seen, err := tb.Seen(a); seen || err != nil {
				t.Errorf("%s still reads as having had a flow after Unsee (%v)", a, err)
			}
		}
	})
}

// A table without the sets of addresses that had flows (one of an earlier
// layout, or whose set was deleted by hand) recorded nothing: every
// address reads as having had flows, so that a DEL still cleans up. So
// it does on a connection whose dump of the chains (Uplinks, a DEL's)
// found the base chains emptied, which is what lets a set go.
func TestATableWithoutTheSeenSetsReadsEveryAddressAsSeen(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		ensureApart(t)
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true}, EnsureBase: true}))
		if seen, err := tb.Seen(ext4); seen || err != nil {
			t.Fatalf("%s reads as seen %v (%v) before any flow", ext4, seen, err)
		}
		for _, c := range []string{chainPrerouting, chainOutput, chainPostrouting} {
			nft(t, netns, "flush", "chain", "inet", TableName, c)
		}
		nft(t, netns, "delete", "set", "inet", TableName, "seen4")
		for _, dumped := range []bool{false, true} {
			other, err := Open()
			must(t, err)
			defer other.Close()
			if dumped {
				_, err = other.Uplinks()
				must(t, err)
			}
			for _, a := range []netip.Addr{ext4, ext6} {
				if seen, err := other.Seen(a); !seen || err != nil {
					t.Errorf("with no set seen4 (chains dumped first: %v), %s reads as seen %v (%v), want seen", dumped, a, seen, err)
				}
			}
		}
	})
}

// A DEL's dump of the chains (Uplinks) that finds the base intact tells
// that the seen sets are there: the base rules use them, and the kernel
// refuses to delete a set in use. Seen then reads a missing element as
// unseen without listing the table's sets; a connection that made no such
// dump lists them once.
func TestSeenAfterUplinksFoundTheBaseIntactListsNoSets(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		ensureApart(t)
		if _, err := tb.Uplinks(); err != nil {
			t.Fatal(err)
		}
		for _, a := range []netip.Addr{ext4, ctrA, ext6} {
			if seen, err := tb.Seen(a); seen || err != nil {
				t.Errorf("%s reads as seen %v (%v) before any flow", a, seen, err)
			}
		}
		if n := tb.c.SetListings; n != 0 {
			t.Errorf("Seen after Uplinks found the base intact listed the sets %d times, want none", n)
		}
		other, err := Open()
		must(t, err)
		defer other.Close()
		for _, a := range []netip.Addr{ext4, ctrA} {
			if seen, err := other.Seen(a); seen || err != nil {
				t.Errorf("%s reads as seen %v (%v) before any flow", a, seen, err)
			}
		}
		if n := other.c.SetListings; n != 1 {
			t.Errorf("Seen with no dump of the chains listed the sets %d times, want once per connection", n)
		}
	})
}

// A change the kernel refuses as one transaction, and that then fails step
// by step too, returns the kernel's reason for the first refusal beside
// the step's own error: the step's may say less (here a check of ours
// that never reaches the kernel), and the transaction's is what a person
// debugging the table needs.
func TestARefusedTransactionsKernelReasonIsKeptInTheFinalError(t *testing.T) {
	inNetNS(t, func(_ string, tb *Table) {
		must(t, tb.Ensure())
		// An IPv4 source sent from an IPv6 address: a 16-byte value in a
		// map of 4-byte ones, which the kernel refuses (ERANGE or EINVAL).
		err := tb.Apply(Change{Egress: map[EgressKey]netip.Addr{{ctrA, "uplink0"}: ext6}})
		if err == nil {
			t.Fatal("Apply of an IPv4 source sent from an IPv6 address succeeded")
		}
		t.Logf("Apply: %v", err)
		var errno unix.Errno
		if !strings.Contains(err.Error(), "families differ") || !strings.Contains(err.Error(), "refused first: ") ||
			errors.As(err, &errno) {
			t.Errorf("Apply's error %q: want the step's reason (families differ) and the transaction's, "+
				"the latter as text only (callers tell errors apart by the step's)", err)
		}
		for _, reason := range []error{unix.ERANGE, unix.EINVAL} {
			if strings.Contains(err.Error(), reason.Error()) {
				return
			}
		}
		t.Errorf("Apply's error %q names neither ERANGE nor EINVAL, the kernel's reason for the refused transaction", err)
	})
}

// After `nft flush ruleset` the sets that recorded the flows are gone
// with the table: the call that makes it anew (the DEL of the IP's last
// holder) could not tell a flow of before, and reads every address as
// seen; a later call reads what the new table recorded.
func TestACallThatMadeTheTableAnewReadsEveryAddressAsSeen(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: {ctrA}}, Fresh: map[netip.Addr]bool{ext4: true}, EnsureBase: true}))
		nft(t, netns, "flush", "ruleset")
		del, err := Open()
		must(t, err)
		defer del.Close()
		var remade bool
		must(t, del.Apply(Change{Ingress: map[netip.Addr][]netip.Addr{ext4: nil}, Remade: &remade}))
		if seen, err := del.Seen(ext4); !remade || !seen || err != nil {
			t.Errorf("the DEL that made the table anew: remade %v, %s seen %v (%v), want both", remade, ext4, seen, err)
		}
		later, err := Open()
		must(t, err)
		defer later.Close()
		if seen, err := later.Seen(ext4); seen || err != nil {
			t.Errorf("a later call reads %s as seen %v (%v), which the new table never recorded", ext4, seen, err)
		}
	})
}
