package uplinkroute

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// The planner's decisions that need no kernel: what a steering needs
// marked for which uplink, what a change leaves, and which chains a
// change may empty. Tables of values, no fake, no file.

var (
	ipA   = netip.MustParseAddr("198.51.100.1")
	ipB   = netip.MustParseAddr("203.0.113.5")
	ctr   = netip.MustParsePrefix("10.88.0.5/24")
	ctrB  = netip.MustParsePrefix("10.88.0.6/24")
	onTwo = map[netip.Addr]string{ipA: "eth0", ipB: "eth1"}
)

func steering(mode traffic.Mode, c netip.Prefix, ips ...netip.Addr) *store.Steering {
	return steer.Decide(mode, []netip.Prefix{c}, ips, onTwo, nil)
}

func TestNeedsMarkEachSteeredIPOnItsUplinkAndTheContainerByItsFirstEgressOfTheFamily(t *testing.T) {
	both := []netip.Addr{ipA, ipB}
	for _, tt := range []struct {
		name string
		s    *store.Steering
		ips  []netip.Addr
		want []Need
	}{
		{"no steering needs nothing", nil, both, nil},
		{"both: each IP where it arrives, the container by its first IP's uplink",
			steering(traffic.Both, ctr, both...), both,
			[]Need{{Uplink: "eth0", Addr: ipA, IP: ipA}, {Uplink: "eth1", Addr: ipB, IP: ipB}, {Uplink: "eth0", Addr: ctr.Addr(), Egress: true, IP: ipA}}},
		{"ingress: the IPs alone", steering(traffic.Ingress, ctr, ipB), []netip.Addr{ipB},
			[]Need{{Uplink: "eth1", Addr: ipB, IP: ipB}}},
		{"egress: the container alone", steering(traffic.Egress, ctr, ipB), []netip.Addr{ipB},
			[]Need{{Uplink: "eth1", Addr: ctr.Addr(), Egress: true, IP: ipB}}},
		{"an IP with no uplink yet is not marked", steering(traffic.Ingress, ctr, ipB), []netip.Addr{netip.MustParseAddr("198.51.100.9")},
			nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Needs(tt.s, tt.ips, onTwo); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Needs =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestLeavingIsTheEgressNoLongerNeededAndTheIPsNoHolderSteersIn(t *testing.T) {
	was := steering(traffic.Both, ctr, ipB)
	now := Needs(steering(traffic.Both, ctrB, ipB), []netip.Addr{ipB}, onTwo)
	for _, tt := range []struct {
		name string
		now  []Need
		want [][]netip.Addr // ipB's targets after the change
		out  []Need
	}{
		{"a release of the last holder: its egress and the IP go",
			nil, [][]netip.Addr{nil},
			[]Need{{Uplink: "eth1", Addr: ctr.Addr(), Egress: true, IP: ipB}, {Uplink: "eth1", Addr: ipB, IP: ipB}}},
		{"a re-ADD with a new container address: the old egress goes, the IP stays steered",
			now, [][]netip.Addr{{ctrB.Addr()}},
			[]Need{{Uplink: "eth1", Addr: ctr.Addr(), Egress: true, IP: ipB}}},
		{"another holder still steers the IP in: only the egress goes",
			nil, [][]netip.Addr{{ctrB.Addr()}},
			[]Need{{Uplink: "eth1", Addr: ctr.Addr(), Egress: true, IP: ipB}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Leaving([]netip.Addr{ipB}, []*store.Steering{was}, tt.want, tt.now, onTwo)
			if !reflect.DeepEqual(got, tt.out) {
				t.Errorf("Leaving =\n %+v\nwant\n %+v", got, tt.out)
			}
		})
	}
}

func TestAChangeEmptiesOnlyTheChainsItTakesTheirLastMembersFrom(t *testing.T) {
	marked := map[string]nat.UplinkSlot{
		"eth1": {Slot: 1, Mark: 0x01000000, Routed: [2]bool{true, true}, Members: [2]int{2, 1}},
		"eth2": {Slot: 2, Mark: 0x02000000, Routed: [2]bool{true, false}, Members: [2]int{-1, 0}},
	}
	v6 := netip.MustParseAddr("2001:db8::5")
	del := []nat.UplinkMember{
		{Slot: 1, Uplink: "eth1", Addr: ipB},
		{Slot: 1, Uplink: "eth1", Addr: v6},
		{Slot: 2, Uplink: "eth2", Addr: ipA},
	}
	// eth1's IPv4 chain keeps a member; its IPv6 chain loses its one; eth2's
	// count is unknown (-1), so its chain is not taken for empty.
	want := []nat.UplinkChain{{Uplink: "eth1", Slot: 1, Mark: 0x01000000, V6: true}}
	if got := maybeEmptied(marked, del); !reflect.DeepEqual(got, want) {
		t.Errorf("maybeEmptied = %+v, want %+v", got, want)
	}
}
