package uplinkroute

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// mainNode is a namespace with two uplinks, up0 (default routes of
// metric 100) and up1 (metric 200), and a bridge holding a few external
// IPs as routes, as route mode does.
type mainNode struct {
	t    *testing.T
	name string
}

func newMainNode(t *testing.T) *mainNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	b := make([]byte, 4)
	rand.Read(b)
	n := &mainNode{t: t, name: "eip-ur-" + hex.EncodeToString(b)}
	n.sh("ip netns add " + n.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.name).Run() })
	for _, c := range []string{
		"sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0",
		"ip link add up0 type veth peer name up0p", "ip link add up1 type veth peer name up1p",
		"ip link add hold0 type bridge",
		"ip link set up0 up", "ip link set up0p up", "ip link set up1 up", "ip link set up1p up", "ip link set hold0 up",
		"ip addr add 192.0.2.1/24 dev up0", "ip addr add 198.51.100.1/24 dev up1",
		"ip addr add 2001:db8:1::1/64 dev up0 nodad", "ip addr add 2001:db8:2::1/64 dev up1 nodad",
		"ip route add default via 192.0.2.254 dev up0 metric 100", "ip route add default via 198.51.100.254 dev up1 metric 200",
		"ip -6 route add default via 2001:db8:1::fe dev up0 metric 100", "ip -6 route add default via 2001:db8:2::fe dev up1 metric 200",
		"ip route add 198.18.0.10/32 dev hold0 scope link proto 200", "ip -6 route add 2001:db8:4::10/128 dev hold0 proto 200",
	} {
		n.sh("ip netns exec " + n.name + " " + c)
	}
	return n
}

func (n *mainNode) sh(cmd string) {
	n.t.Helper()
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		n.t.Fatalf("%s: %v: %s", cmd, err, out)
	}
}

// in runs f in the namespace with a fresh Routes, and the index of up0
// and up1.
func (n *mainNode) in(f func(r *Routes, up0, up1 int)) {
	n.t.Helper()
	nsh, err := ns.GetNS("/var/run/netns/" + n.name)
	if err != nil {
		n.t.Fatal(err)
	}
	defer nsh.Close()
	err = nsh.Do(func(ns.NetNS) error {
		i0, err := net.InterfaceByName("up0")
		if err != nil {
			return err
		}
		i1, err := net.InterfaceByName("up1")
		if err != nil {
			return err
		}
		r := Open(slots.Default())
		defer r.Close()
		f(r, i0.Index, i1.Index)
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
}

// The default route's uplink is one lookup, whatever the main table
// holds; the main table is listed only when the lookup cannot tell (a
// route covers the far destination), and then gives the same answer.
func TestDefaultUplinkIsOneLookupAndTheListingOnlyWhenTheLookupCannotTell(t *testing.T) {
	n := newMainNode(t)
	for _, v6 := range []bool{false, true} {
		n.in(func(r *Routes, up0, up1 int) {
			dev, err := r.DefaultUplink(v6)
			if err != nil || dev != up0 {
				t.Errorf("IPv6 %v: DefaultUplink = %d, %v; want up0 (%d), the metric 100 one", v6, dev, err, up0)
			}
			if r.main != nil {
				t.Errorf("IPv6 %v: the main table was listed though the lookup found its default route", v6)
			}
		})
	}
	n.sh("ip netns exec " + n.name + " ip route add 240.0.0.0/4 via 198.51.100.254 dev up1")
	n.sh("ip netns exec " + n.name + " ip -6 route add 3fff::/20 via 2001:db8:2::fe dev up1")
	for _, v6 := range []bool{false, true} {
		n.in(func(r *Routes, up0, up1 int) {
			dev, err := r.DefaultUplink(v6)
			if err != nil || dev != up0 {
				t.Errorf("IPv6 %v, the far destination routed by up1: DefaultUplink = %d, %v; want up0 (%d)", v6, dev, err, up0)
			}
			if r.main == nil {
				t.Errorf("IPv6 %v: the lookup's answer, a route that is not a default route, was taken without listing the main table", v6)
			}
		})
	}
}

// An uplink's gateway comes from the routes through it alone: its own
// default route, else the longest route to the IP through it, also a
// multipath one, never the held IPs' routes or another uplink's.
func TestGatewayReadsOnlyTheRoutesThroughTheUplink(t *testing.T) {
	n := newMainNode(t)
	n.sh("ip netns exec " + n.name + " ip route add 203.0.113.0/24 nexthop via 192.0.2.253 dev up0 nexthop via 198.51.100.253 dev up1")
	n.in(func(r *Routes, up0, up1 int) {
		for _, c := range []struct {
			index int
			ip    string
			want  string
		}{
			{up1, "198.18.0.10", "198.51.100.254"},
			{up1, "2001:db8:4::10", "2001:db8:2::fe"},
			{up0, "198.18.0.10", "192.0.2.254"},
		} {
			if gw, err := r.Gateway(c.index, netip.MustParseAddr(c.ip)); err != nil || gw.String() != c.want {
				t.Errorf("Gateway(%d, %s) = %v, %v; want %s", c.index, c.ip, gw, err, c.want)
			}
		}
		for _, rs := range r.via {
			for _, rt := range rs {
				if strings.HasPrefix(rt.Dst.String(), "198.18.0.10/") || strings.HasPrefix(rt.Dst.String(), "2001:db8:4::10/") {
					t.Errorf("the listing for a gateway read the held IP's route %s", rt.Dst)
				}
			}
		}
	})
	n.sh("ip netns exec " + n.name + " ip route del default via 198.51.100.254 dev up1")
	n.in(func(r *Routes, up0, up1 int) {
		if gw, err := r.Gateway(up1, netip.MustParseAddr("203.0.113.10")); err != nil || gw.String() != "198.51.100.253" {
			t.Errorf("with no default route on up1, Gateway toward 203.0.113.10 = %v, %v; want the multipath route's hop 198.51.100.253", gw, err)
		}
	})
}

// With no default route at all the lookup finds no route, which is the
// answer: the main table is not listed (it holds a route per IP held as
// a route, which every steered ADD would read).
func TestNoDefaultRouteIsOneLookupToo(t *testing.T) {
	n := newMainNode(t)
	n.sh("ip netns exec " + n.name + " ip route flush exact 0/0")
	n.sh("ip netns exec " + n.name + " ip -6 route flush exact ::/0")
	for _, v6 := range []bool{false, true} {
		n.in(func(r *Routes, up0, up1 int) {
			dev, err := r.DefaultUplink(v6)
			if err != nil || dev != 0 {
				t.Errorf("IPv6 %v, no default route: DefaultUplink = %d, %v; want 0", v6, dev, err)
			}
			if r.main != nil {
				t.Errorf("IPv6 %v: the main table was listed though no route reaches the far destination", v6)
			}
		})
	}
}

// Removing a slot deletes its default route of each family by table,
// destination and protocol: no listing of the table (it was one dump per
// family on the last DEL of an uplink), and nothing of ours is left,
// while another program's route in the table is kept.
func TestRemoveTakesTheSlotAwayWithoutADump(t *testing.T) {
	n := newMainNode(t)
	gw := [2]netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:2::fe")}
	n.in(func(r *Routes, up0, up1 int) {
		if err := r.Ensure(1, "up1", 0, gw, true); err != nil {
			t.Fatal(err)
		}
		table := slots.Default().TableOf(1)
		n.sh("ip netns exec " + n.name + " ip route add 203.0.113.0/24 via 198.51.100.254 dev up1 table " + itoa(table))
		before := r.dumps
		if err := r.Remove(1, [2]bool{true, true}, [2]bool{true, true}); err != nil {
			t.Fatal(err)
		}
		if d := r.dumps - before; d != 0 {
			t.Errorf("Remove asked for %d dumps; want 0", d)
		}
		st, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if sl := st.Slots[1]; sl != nil && (sl.Gateway != [2]netip.Addr{} || sl.Rule != [2]bool{}) {
			t.Errorf("after Remove, slot 1 = %+v; want nothing of ours", sl)
		}
		if st.Suppress != [2]bool{} {
			t.Errorf("after the last slot's Remove, suppress rules = %v; want none", st.Suppress)
		}
		if len(st.Foreign) != 1 || !strings.Contains(st.Foreign[0], "203.0.113.0/24") {
			t.Errorf("foreign = %q; want the other program's route kept", st.Foreign)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// The rules of both families come from one dump: Read still sees ours of
// each family, and Collides another program's IPv6 rule on a slot's
// table, with 2 dumps (rules, and the slot's table of both families)
// where it made 4.
func TestRulesOfBothFamiliesAreOneDump(t *testing.T) {
	n := newMainNode(t)
	gw := [2]netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:2::fe")}
	n.sh("ip netns exec " + n.name + " ip -6 rule add pref 500 fwmark 0x1 table " + itoa(slots.Default().TableOf(2)))
	n.in(func(r *Routes, up0, up1 int) {
		if err := r.Ensure(1, "up1", 0, gw, true); err != nil {
			t.Fatal(err)
		}
		before := r.dumps
		st, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if d, want := r.dumps-before, 1+slots.Default().Slots(); d != want {
			t.Errorf("Read asked for %d dumps; want %d (one of rules, one per slot for both families)", d, want)
		}
		if sl := st.Slots[1]; sl == nil || sl.Rule != [2]bool{true, true} || st.Suppress != [2]bool{true, true} {
			t.Errorf("Read: slot 1 %+v, suppress %v; want the rules of both families", sl, st.Suppress)
		}
		before = r.dumps
		why, err := r.Collides(2)
		if err != nil || !strings.Contains(why, "pref 500") {
			t.Errorf("Collides(2) = %q, %v; want the IPv6 rule of pref 500", why, err)
		}
		if d := r.dumps - before; d != 2 {
			t.Errorf("Collides asked for %d dumps; want 2", d)
		}
	})
}

// A mark of 16 bits allows 65,535 slots: Read makes two dumps (rules,
// and every table at once), not one per slot, and still sees our slots'
// routes and another program's route in one of our tables, and nothing
// of the tables that are not ours.
func TestReadOfAWideMarkIsTwoDumpsWhateverItsWidth(t *testing.T) {
	n := newMainNode(t)
	gw := [2]netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:2::fe")}
	wide := slots.Config{Mask: 0xffff0000, Table: 100000, Priority: 4240}
	if err := wide.Validate(); err != nil {
		t.Fatalf("the config refuses a 16-bit mark: %v", err)
	}
	n.sh("ip netns exec " + n.name + " ip route add 203.0.113.0/24 via 198.51.100.254 dev up1 table " + itoa(wide.TableOf(7)))
	n.in(func(_ *Routes, up0, up1 int) {
		r := Open(wide)
		defer r.Close()
		for _, s := range []int{1, 300} {
			if err := r.Ensure(s, "up1", up1, gw, true); err != nil {
				t.Fatal(err)
			}
		}
		before := r.dumps
		st, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if d := r.dumps - before; d != 2 {
			t.Errorf("Read with %d slots asked for %d dumps; want 2", wide.Slots(), d)
		}
		for _, s := range []int{1, 300} {
			if sl := st.Slots[s]; sl == nil || sl.Gateway != gw || sl.Uplink != "up1" || sl.Rule != [2]bool{true, true} {
				t.Errorf("Read: slot %d = %+v; want its routes of both families through up1 and its rules", s, sl)
			}
		}
		if len(st.Slots) != 2 {
			t.Errorf("Read found slots %v; want 1 and 300 only", slices.Collect(maps.Keys(st.Slots)))
		}
		if len(st.Foreign) != 1 || !strings.Contains(st.Foreign[0], "203.0.113.0/24") {
			t.Errorf("foreign = %q; want the other program's route in slot 7's table only", st.Foreign)
		}
	})
}

// Ensure given the uplink's index does not look the uplink up by name
// (one request fewer on a fresh slot's ADD), and routes by that index.
func TestEnsureGivenTheIndexLooksNoLinkUp(t *testing.T) {
	n := newMainNode(t)
	gw := [2]netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:2::fe")}
	n.in(func(r *Routes, up0, up1 int) {
		if err := r.Ensure(1, "up1", up1, gw, true); err != nil {
			t.Fatal(err)
		}
		if r.links != 0 {
			t.Errorf("Ensure given the index looked %d links up by name; want 0", r.links)
		}
		st, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if sl := st.Slots[1]; sl == nil || sl.Uplink != "up1" || sl.Gateway != gw {
			t.Errorf("slot 1 = %+v; want up1 by %v", sl, gw)
		}
	})
}
