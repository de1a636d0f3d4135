package steer

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
)

// TestCompareNATFindsWhatIsMissingStrayOrDiffering is the one comparison
// that GC applies, status reports and CHECK fails on: each row is a
// table as the records want it, the table as read back, and every
// difference the comparison must name.
func TestCompareNATFindsWhatIsMissingStrayOrDiffering(t *testing.T) {
	other := netip.MustParseAddr("198.51.100.9") // on another holder device: never ours to call stray
	ctrX := netip.MustParseAddr("10.77.0.7")     // a target of that device's IP
	keyA := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	keyB := nat.EgressKey{Source: ctrB4.Addr(), Uplink: "eth0"}
	subnet, wide := ctrA4.Masked(), netip.MustParsePrefix("10.88.0.0/16")
	want := func() Want {
		w := NewWant()
		w.Ingress[v4a] = []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}
		w.Egress[keyA] = v4a
		w.Hairpin[subnet] = true
		w.Held[v4a] = true
		return w
	}
	inSync := func() *nat.State {
		return &nat.State{Present: true, Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrA4.Addr(), ctrB4.Addr()}},
			Egress: map[nat.EgressKey]netip.Addr{keyA: v4a}, Hairpin: []netip.Prefix{subnet}}
	}
	for _, tt := range []struct {
		name  string
		w     Want
		table func(st *nat.State) *nat.State
		want  Diff
	}{
		{"in sync", want(), func(st *nat.State) *nat.State { return st }, Diff{}},
		{"no table and nothing wanted", NewWant(),
			func(*nat.State) *nat.State { return &nat.State{} }, Diff{}},
		{"no table while rules are wanted", want(),
			func(*nat.State) *nat.State { return &nat.State{Ingress: map[netip.Addr][]netip.Addr{}} },
			Diff{Broken: "is missing",
				Ingress:  []IngressDiff{{IP: v4a, Want: []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}}},
				Egress:   []EgressDiff{{Key: keyA, Want: v4a}},
				Unserved: []netip.Prefix{subnet}, Hairpin: nat.Change{Hairpin: []netip.Prefix{subnet}}}},
		{"a base chain flushed", want(),
			func(st *nat.State) *nat.State { st.Broken = []string{"chain prerouting"}; return st },
			Diff{Broken: "[chain prerouting]"}},
		{"ingress missing a target, egress from another IP", want(),
			func(st *nat.State) *nat.State {
				st.Ingress[v4a] = []netip.Addr{ctrA4.Addr()}
				st.Egress[keyA] = v4b
				return st
			},
			Diff{Ingress: []IngressDiff{{v4a, []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}, []netip.Addr{ctrA4.Addr()}}},
				Egress: []EgressDiff{{keyA, v4a, v4b}}}},
		{"a wanted IP whose chain no element points at", want(),
			func(st *nat.State) *nat.State { st.Stray = []netip.Addr{v4a}; return st },
			Diff{Ingress: []IngressDiff{{v4a, []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}, []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}}}}},
		{"stray rules of ours go, another device's stay", want(),
			func(st *nat.State) *nat.State {
				st.Ingress[v4b] = []netip.Addr{ctrB4.Addr()}
				st.Stray = []netip.Addr{v6a}
				st.Ingress[other] = []netip.Addr{ctrX}
				st.Egress[keyB] = v4b
				st.Egress[nat.EgressKey{Source: ctrX, Uplink: "eth0"}] = other
				return st
			},
			Diff{StrayIngress: []IngressDiff{{IP: v4b, Got: []netip.Addr{ctrB4.Addr()}}, {IP: v6a}},
				StrayEgress: []EgressDiff{{Key: keyB, Got: v4b}}}},
		{"a hairpin subnet missing", want(),
			func(st *nat.State) *nat.State { st.Hairpin = nil; return st },
			Diff{Unserved: []netip.Prefix{subnet}, Hairpin: nat.Change{Hairpin: []netip.Prefix{subnet}}}},
		{"a wider subnet serves, and gives way to the one the records need", want(),
			func(st *nat.State) *nat.State { st.Hairpin = []netip.Prefix{wide}; return st },
			Diff{Hairpin: nat.Change{Hairpin: []netip.Prefix{subnet}, DelHairpin: []netip.Prefix{wide}}}},
		{"a subnet no record needs goes, one another device steers into stays", want(),
			func(st *nat.State) *nat.State {
				st.Ingress[other] = []netip.Addr{ctrX}
				st.Hairpin = append(st.Hairpin, netip.MustParsePrefix("10.66.0.0/24"), netip.MustParsePrefix("10.77.0.0/24"))
				return st
			},
			Diff{Hairpin: nat.Change{DelHairpin: []netip.Prefix{netip.MustParsePrefix("10.66.0.0/24")}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			owns := func(ip netip.Addr) bool { return ip != other }
			got := Compare(tt.w, tt.table(inSync()), owns)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Compare =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

// The three consumers word the same result: status names each difference
// once, and the hairpin subnets GC would remove only with the state lost.
func TestNATDiffDriftNamesEachDifference(t *testing.T) {
	keyA := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	d := Diff{Broken: "is missing",
		Ingress:      []IngressDiff{{v4a, []netip.Addr{ctrA4.Addr()}, nil}},
		StrayIngress: []IngressDiff{{IP: v4b, Got: []netip.Addr{ctrB4.Addr()}}},
		Egress:       []EgressDiff{{keyA, v4a, netip.Addr{}}},
		StrayEgress:  []EgressDiff{{Key: keyA, Got: v4b}},
		Unserved:     []netip.Prefix{ctrA4.Masked()},
		Hairpin:      nat.Change{DelHairpin: []netip.Prefix{netip.MustParsePrefix("10.66.0.0/24")}},
	}
	want := []string{
		"nftables table inet external-ip: is missing",
		"198.51.100.1: ingress steers to [], the records to [10.88.0.5]",
		"198.51.100.2: ingress rule to [10.88.0.6] held by no record",
		"10.88.0.5: egress via eth0 from invalid IP, the records say 198.51.100.1",
		"10.88.0.5: egress via eth0 from 198.51.100.2 held by no record",
		"10.88.0.0/24: no hairpin rule for the subnet",
	}
	if got := d.Drift(false); !slices.Equal(got, want) {
		t.Errorf("drift =\n %q\nwant\n %q", got, want)
	}
	lost := append(want, "10.66.0.0/24: hairpin subnet needed by no record")
	if got := d.Drift(true); !slices.Equal(got, lost) {
		t.Errorf("drift with the state lost =\n %q\nwant\n %q", got, lost)
	}
}
