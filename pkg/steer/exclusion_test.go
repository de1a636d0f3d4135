package steer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

var (
	podCIDR4 = netip.MustParsePrefix("10.244.0.0/16")
	svcCIDR4 = netip.MustParsePrefix("10.96.0.0/12")
	svcCIDR6 = netip.MustParsePrefix("fd00:96::/108")
	ctrC4    = netip.MustParsePrefix("10.77.0.5/24") // a container of a second network
)

// steered is a record of one container holding ip, with the network's
// list excluded.
func steered(ctr netip.Prefix, ip netip.Addr, excluded ...netip.Prefix) *store.Record {
	s := Decide(traffic.Both, []netip.Prefix{ctr}, []netip.Addr{ip}, placedOn(ip, "eth0"), excluded)
	return &store.Record{IPs: []netip.Addr{ip}, Steering: s}
}

func TestExclusionsAreEachContainerSubnetWithEachDestinationOfItsFamily(t *testing.T) {
	s := Decide(traffic.Both, []netip.Prefix{ctrA4, ctrA6}, []netip.Addr{v4a, v6a}, placedOn(v4a, "eth0", v6a, "eth0"),
		[]netip.Prefix{podCIDR4, svcCIDR6, svcCIDR4})
	want := "[{10.88.0.0/24 10.244.0.0/16} {10.88.0.0/24 10.96.0.0/12} {fd00::/64 fd00:96::/108}]"
	if got := fmt.Sprint(ExclusionsOf(s)); got != want {
		t.Errorf("exclusion elements %s, want %s", got, want)
	}
	in := Decide(traffic.Ingress, []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"), []netip.Prefix{podCIDR4})
	if in.Excluded != nil || ExclusionsOf(in) != nil {
		t.Errorf("traffic ingress SNATs nothing, yet keeps exclusions %v (elements %v)", in.Excluded, ExclusionsOf(in))
	}
	var old store.Steering // as a record written before the key existed has it
	if err := json.Unmarshal([]byte(`{"traffic":"both","containerAddrs":["10.88.0.5/24"],"egress":[{"source":"10.88.0.5","uplink":"eth0","ip":"198.51.100.1"}]}`), &old); err != nil {
		t.Fatal(err)
	}
	if got := ExclusionsOf(&old); got != nil {
		t.Errorf("a record written before the key existed has exclusion elements %v, want none", got)
	}
}

// One table serves every network of the node: each record's elements
// pair its own container subnet with its own network's list, never the
// other network's.
func TestTwoNetworksWantTheirOwnExclusionsOnly(t *testing.T) {
	w := WantOf(map[string]*store.Record{
		"a": steered(ctrA4, v4a, svcCIDR4),
		"c": steered(ctrC4, v4b, podCIDR4),
	})
	want := map[intervals.Pair]bool{{Src: ctrA4.Masked(), Dst: svcCIDR4}: true, {Src: ctrC4.Masked(), Dst: podCIDR4}: true}
	if fmt.Sprint(w.Excluded) != fmt.Sprint(want) {
		t.Errorf("the records want exclusions %v, want %v", w.Excluded, want)
	}
}

// GC compares the table with every record of the state directory: the
// elements of a network whose records went are removed, another
// network's and another holder device's stay, and a missing one comes
// back.
func TestGCKeepsTheExclusionsOfOtherNetworksAndDevices(t *testing.T) {
	other := netip.MustParseAddr("198.51.100.9") // another holder device's external IP
	ctrX := netip.MustParseAddr("10.66.0.7")     // the container it SNATs
	gone := intervals.Pair{Src: ctrA4.Masked(), Dst: svcCIDR4}
	kept := intervals.Pair{Src: ctrC4.Masked(), Dst: podCIDR4}
	device := intervals.Pair{Src: netip.MustParsePrefix("10.66.0.0/24"), Dst: podCIDR4}
	st := &nat.State{Present: true, Ingress: map[netip.Addr][]netip.Addr{},
		Egress:   map[nat.EgressKey]netip.Addr{{Source: ctrX, Uplink: "eth0"}: other},
		Excluded: []intervals.Pair{device, gone, kept}}
	w := WantOf(map[string]*store.Record{"c": steered(ctrC4, v4b, podCIDR4)})
	owns := func(ip netip.Addr) bool { return ip != other }
	d := Compare(w, st, owns)
	if fmt.Sprint(d.Exclusion.DelExclude) != fmt.Sprint([]intervals.Pair{gone}) || d.Exclusion.Exclude != nil || d.Unexcluded != nil {
		t.Errorf("GC plans +%v -%v (unexcluded %v), want only the gone network's %v removed", d.Exclusion.Exclude, d.Exclusion.DelExclude, d.Unexcluded, gone)
	}
	st.Excluded = []intervals.Pair{device}
	d = Compare(w, st, owns)
	if fmt.Sprint(d.Exclusion.Exclude) != fmt.Sprint([]intervals.Pair{kept}) || fmt.Sprint(d.Unexcluded) != fmt.Sprint([]intervals.Pair{kept}) {
		t.Errorf("with %v missing, GC plans +%v -%v (unexcluded %v), want it back", kept, d.Exclusion.Exclude, d.Exclusion.DelExclude, d.Unexcluded)
	}
}

// CHECK fails with the code of every steering drift when an element of
// the attachment's is missing, and status names it (its word "egress"
// makes it NAT drift, package report's kinds).
func TestCheckFailsWhenAnExclusionElementIsMissing(t *testing.T) {
	rec := steered(ctrA4, v4a, svcCIDR4)
	holders := map[netip.Addr][]HeldBy{v4a: {{"a", rec.Steering}}}
	st := &nat.State{Present: true, Ingress: map[netip.Addr][]netip.Addr{v4a: {ctrA4.Addr()}},
		Egress:  map[nat.EgressKey]netip.Addr{{Source: ctrA4.Addr(), Uplink: "eth0"}: v4a},
		Hairpin: []netip.Prefix{ctrA4.Masked()}, Excluded: []intervals.Pair{{Src: ctrA4.Masked(), Dst: svcCIDR4}}}
	never := func(netip.Addr) bool { return false }
	uplink := func(netip.Addr) (string, error) { return "eth0", nil }
	if err := Check(rec, rec.Steering.Container, Compare(WantOfRecord(rec, holders), st, never), uplink); err != nil {
		t.Fatalf("CHECK with every element there: %v", err)
	}
	st.Excluded = nil
	d := Compare(WantOfRecord(rec, holders), st, never)
	err := Check(rec, rec.Steering.Container, d, uplink)
	if !errors.Is(err, ErrDrift) || !strings.Contains(fmt.Sprint(err), "10.96.0.0/12") {
		t.Errorf("CHECK with the exclusion element gone: %v, want drift naming 10.96.0.0/12", err)
	}
	lines := d.Drift(false)
	if want := "10.88.0.0/24 to 10.96.0.0/12: no egress exclusion element, its flows are SNATed"; len(lines) != 1 || lines[0] != want {
		t.Errorf("status words it as %q, want %q", lines, want)
	}
}
