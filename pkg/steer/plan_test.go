package steer

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// The steering decisions are pure: these tables give them records and a
// change, and compare what they decide; no kernel, no fake, no file.

// The addresses of the tables: external IPs, and container addresses.
var (
	v4a   = netip.MustParseAddr("198.51.100.1")
	v4b   = netip.MustParseAddr("198.51.100.2")
	v6a   = netip.MustParseAddr("2001:db8::1")
	ctrA4 = netip.MustParsePrefix("10.88.0.5/24")
	ctrB4 = netip.MustParsePrefix("10.88.0.6/24")
	ctrA6 = netip.MustParsePrefix("fd00::5/64")
)

// placedOn is each IP's uplink, from pairs of IP and uplink name.
func placedOn(pairs ...any) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for i := 0; i < len(pairs); i += 2 {
		out[pairs[i].(netip.Addr)] = pairs[i+1].(string)
	}
	return out
}

func TestDecideSteeringGivesEachModeItsRules(t *testing.T) {
	hpA := store.HairpinRule{Source: ctrA4.Masked(), Target: ctrA4.Addr()}
	hp6 := store.HairpinRule{Source: ctrA6.Masked(), Target: ctrA6.Addr()}
	for _, tt := range []struct {
		name      string
		traffic   traffic.Mode
		container []netip.Prefix
		ips       []netip.Addr
		placed    map[netip.Addr]string
		want      *store.Steering
	}{
		{"none steers nothing", traffic.None, []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"), nil},
		{"an empty mode steers nothing", "", []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"), nil},
		{"both: egress from the first IP of the family per uplink, a hairpin per target",
			traffic.Both, []netip.Prefix{ctrA4, ctrA6}, []netip.Addr{v4a, v4b, v6a},
			placedOn(v4a, "eth0", v4b, "eth0", v6a, "eth0"),
			&store.Steering{Traffic: string(traffic.Both), Container: []netip.Prefix{ctrA4, ctrA6},
				Egress:  []store.EgressRule{{Source: ctrA4.Addr(), Uplink: "eth0", IP: v4a}, {Source: ctrA6.Addr(), Uplink: "eth0", IP: v6a}},
				Hairpin: []store.HairpinRule{hpA, hp6}}},
		{"both: a second uplink gets its own egress, from its own IP",
			traffic.Both, []netip.Prefix{ctrA4}, []netip.Addr{v4a, v4b},
			placedOn(v4a, "eth0", v4b, "eth1"),
			&store.Steering{Traffic: string(traffic.Both), Container: []netip.Prefix{ctrA4},
				Egress:  []store.EgressRule{{Source: ctrA4.Addr(), Uplink: "eth0", IP: v4a}, {Source: ctrA4.Addr(), Uplink: "eth1", IP: v4b}},
				Hairpin: []store.HairpinRule{hpA}}},
		{"ingress: no egress", traffic.Ingress, []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"),
			&store.Steering{Traffic: string(traffic.Ingress), Container: []netip.Prefix{ctrA4}, Hairpin: []store.HairpinRule{hpA}}},
		{"egress: no hairpin", traffic.Egress, []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"),
			&store.Steering{Traffic: string(traffic.Egress), Container: []netip.Prefix{ctrA4}, Egress: []store.EgressRule{{Source: ctrA4.Addr(), Uplink: "eth0", IP: v4a}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.traffic, tt.container, tt.ips, tt.placed, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func steerOf(traffic traffic.Mode, c netip.Prefix, ip netip.Addr, uplink string) *store.Steering {
	return Decide(traffic, []netip.Prefix{c}, []netip.Addr{ip}, placedOn(ip, uplink), nil)
}

func TestPlanSteerDecidesTheTableChangeAndTheFlowsThatLeave(t *testing.T) {
	a := steerOf(traffic.Both, ctrA4, v4a, "eth0")
	b := steerOf(traffic.Both, ctrB4, v4a, "eth0")
	a2 := steerOf(traffic.Both, netip.MustParsePrefix("10.89.0.5/24"), v4a, "eth0") // a re-ADDed with a new address
	keyA := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	keyB := nat.EgressKey{Source: ctrB4.Addr(), Uplink: "eth0"}
	subnet := ctrA4.Masked()
	for _, tt := range []struct {
		name string
		c    Change
		want Plan
	}{
		{"a first ADD steers the IP to its target and adds its egress and hairpin",
			Change{Touch: []netip.Addr{v4a}, Now: a, Was: []*store.Steering{a},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"a", a}}}, Fresh: map[netip.Addr]bool{v4a: true}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrA4.Addr()}},
				Egress: map[nat.EgressKey]netip.Addr{keyA: v4a}, Hairpin: []netip.Prefix{subnet},
				Fresh: map[netip.Addr]bool{v4a: true}, EnsureBase: true},
				Targets: [][]netip.Addr{{ctrA4.Addr()}}}},
		{"a second holder's ADD spreads the IP over both",
			Change{Touch: []netip.Addr{v4a}, Now: b, Was: []*store.Steering{b},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"a", a}, {"b", b}}}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrA4.Addr(), ctrB4.Addr()}},
				Egress: map[nat.EgressKey]netip.Addr{keyB: v4a}, Hairpin: []netip.Prefix{subnet}, EnsureBase: true},
				Targets: [][]netip.Addr{{ctrA4.Addr(), ctrB4.Addr()}}}},
		{"DEL of one of two holders leaves the other, and forgets the leaving target's flows; the shared subnet stays",
			Change{Touch: []netip.Addr{v4a}, Was: []*store.Steering{a},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"b", b}}}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrB4.Addr()}},
				Egress: map[nat.EgressKey]netip.Addr{}, DelEgress: []nat.EgressKey{keyA}},
				Targets: [][]netip.Addr{{ctrB4.Addr()}}, Leaving: []Gone{{v4a, ctrA4.Addr()}}}},
		{"DEL of the last holder removes the IP's ingress and forgets every flow of it",
			Change{Touch: []netip.Addr{v4a}, Was: []*store.Steering{a}, Holders: map[netip.Addr][]HeldBy{}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: nil},
				Egress: map[nat.EgressKey]netip.Addr{}, DelEgress: []nat.EgressKey{keyA}},
				Targets: [][]netip.Addr{nil}, Leaving: []Gone{{IP: v4a}}}},
		{"undoing a failed ADD on an otherwise empty node removes its hairpin subnet too",
			Change{Touch: []netip.Addr{v4a}, Was: []*store.Steering{a}, Holders: map[netip.Addr][]HeldBy{}},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: nil},
				Egress: map[nat.EgressKey]netip.Addr{}, DelEgress: []nat.EgressKey{keyA}, DelHairpin: []netip.Prefix{subnet}},
				Targets: [][]netip.Addr{nil}, Leaving: []Gone{{IP: v4a}}}},
		{"a re-ADD with a new container address moves ingress and egress, and forgets the old target's flows",
			Change{Touch: []netip.Addr{v4a}, Now: a2, Was: []*store.Steering{a2, a},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"a", a2}}}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: {a2.Container[0].Addr()}},
				Egress:    map[nat.EgressKey]netip.Addr{{Source: a2.Container[0].Addr(), Uplink: "eth0"}: v4a},
				DelEgress: []nat.EgressKey{keyA}, Hairpin: []netip.Prefix{a2.Container[0].Masked()}, EnsureBase: true},
				Targets: [][]netip.Addr{{a2.Container[0].Addr()}}, Leaving: []Gone{{v4a, ctrA4.Addr()}}}},
		{"DEL of one of two attachments with the same container address keeps the egress rule they share",
			Change{Touch: []netip.Addr{v4a}, Was: []*store.Steering{a},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"a-in-net2", a}}}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrA4.Addr()}},
				Egress: map[nat.EgressKey]netip.Addr{}, DelEgress: []nat.EgressKey{}},
				Targets: [][]netip.Addr{{ctrA4.Addr()}}}},
		{"a holder with no record or no steering gives no target",
			Change{Touch: []netip.Addr{v4a}, Was: []*store.Steering{a},
				Holders: map[netip.Addr][]HeldBy{v4a: {{"x", nil}}}, KeepShared: true},
			Plan{Change: nat.Change{Ingress: map[netip.Addr][]netip.Addr{v4a: nil},
				Egress: map[nat.EgressKey]netip.Addr{}, DelEgress: []nat.EgressKey{keyA}},
				Targets: [][]netip.Addr{nil}, Leaving: []Gone{{v4a, ctrA4.Addr()}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlanChange(tt.c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanChange =\n %s\nwant\n %s", planText(got), planText(tt.want))
			}
		})
	}
}

func planText(p Plan) string {
	c := p.Change
	return fmt.Sprintf("ingress %v egress %v del %v hairpin %v del %v fresh %v base %v; targets %v; leaving %v",
		c.Ingress, c.Egress, c.DelEgress, c.Hairpin, c.DelHairpin, c.Fresh, c.EnsureBase, p.Targets, p.Leaving)
}

func TestMovedEgressFollowsTheNewUplinkAndKeepsAKeyAnotherRecordHas(t *testing.T) {
	on := func(c netip.Prefix, uplink string) store.EgressRule {
		return store.EgressRule{Source: c.Addr(), Uplink: uplink, IP: v4a}
	}
	key := func(c netip.Prefix, uplink string) nat.EgressKey {
		return nat.EgressKey{Source: c.Addr(), Uplink: uplink}
	}
	for _, tt := range []struct {
		name     string
		was, now map[string][]store.EgressRule
		egress   map[nat.EgressKey]netip.Addr
		del      []nat.EgressKey
	}{
		{"nothing moved", map[string][]store.EgressRule{"a": {on(ctrA4, "eth0")}}, map[string][]store.EgressRule{"a": {on(ctrA4, "eth0")}},
			map[nat.EgressKey]netip.Addr{}, nil},
		{"a's egress moves from eth0 to eth1",
			map[string][]store.EgressRule{"a": {on(ctrA4, "eth0")}}, map[string][]store.EgressRule{"a": {on(ctrA4, "eth1")}},
			map[nat.EgressKey]netip.Addr{key(ctrA4, "eth1"): v4a}, []nat.EgressKey{key(ctrA4, "eth0")}},
		{"a key that another record now has stays",
			map[string][]store.EgressRule{"a": {on(ctrA4, "eth0")}, "b": {on(ctrA4, "eth1")}},
			map[string][]store.EgressRule{"a": {on(ctrA4, "eth1")}, "b": {on(ctrA4, "eth0")}},
			map[nat.EgressKey]netip.Addr{key(ctrA4, "eth0"): v4a, key(ctrA4, "eth1"): v4a}, []nat.EgressKey{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch := MovedEgress(tt.was, tt.now)
			if !reflect.DeepEqual(ch.Egress, tt.egress) || fmt.Sprint(ch.DelEgress) != fmt.Sprint(tt.del) {
				t.Errorf("MovedEgress sets %v and deletes %v, want %v and %v", ch.Egress, ch.DelEgress, tt.egress, tt.del)
			}
		})
	}
}
