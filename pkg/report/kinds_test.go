package report

import "testing"

// The lines are the assigner's (report.go, routing.go), steer's
// (compare.go) and uplinkroute's (reconcile.go, routes.go), as
// `external-ip status` prints them.
func TestEveryDriftLineHasItsKind(t *testing.T) {
	for _, tc := range []struct{ line, kind string }{
		{"192.0.2.5: held but not on eip0", KindAddress},
		{"192.0.2.5: on eip0 but held by no record", KindAddress},
		{"2001:db8::5: no proxy neighbour entry on up0", KindProxy},
		{"192.0.2.5: no proxy neighbour entry on up0", KindProxy},
		{"192.0.2.5: proxy neighbour entry on up0 held by no record", KindProxy},
		{"192.0.2.5: held as a route but eip0 has no route to it with protocol 200", KindAddress},
		{"192.0.2.5: held as a route but also an address of eip0", KindAddress},
		{"192.0.2.5: routed to eip0 but held by no record", KindAddress},
		{"state directory /run/slot-index/eip0 is missing while eip0 carries addresses or routes: GC and repair remove them", KindAddress},
		{"192.0.2.5: index lists 2 holders, records 1", KindIndex},
		{"192.0.2.5: indexed but held by no record", KindIndex},
		{"192.0.2.5: its uplink up0 is gone; the next ADD or GC chooses another", KindUplink},
		{"an interrupted change is pending in /run/x/eip0/journal; the next ADD, DEL or GC settles it", KindJournal},
		{"nftables table inet external-ip: missing", KindNAT},
		{"192.0.2.5: ingress rule to [10.0.0.2] held by no record", KindNAT},
		{"10.0.0.2: egress via up0 from 192.0.2.5 held by no record", KindNAT},
		{"10.0.0.0/24: no hairpin rule for the subnet", KindNAT},
		{"10.0.0.0/24 to 10.96.0.0/12: no egress exclusion element, its flows are SNATed", KindNAT},
		{"10.0.0.0/24 to 10.96.0.0/12: egress exclusion element needed by no record", KindNAT},
		{"192.0.2.5: ingress steers to [10.0.0.2], the records to [10.0.0.3]", KindNAT},
		{"uplink eth1: not marked for routing, so 198.51.100.10's flows leave by the default route", KindRouting},
		{"198.51.100.10: not marked for uplink eth1 (slot 1) in table inet external-ip", KindRouting},
		{"uplink eth1: not marked for routing (IPv6), so 2001:db8::10's flows leave by the default route", KindRouting},
		{"uplink eth1: no rule pref 4241 for mark 0x1000000 to table 4241 (IPv4)", KindRouting},
		{"no rule pref 4240 (IPv6) that keeps the main table's routes first for marked flows", KindRouting},
		{"uplink eth1: table 4241 routes by 198.51.100.253, want 198.51.100.254 (IPv4)", KindRouting},
		{"uplink eth1: marked (slot 1) but routes no held IP", KindRouting},
		{"10.88.0.5: marked for uplink eth1 (slot 1) but no record routes it there", KindRouting},
		{"slot 2: rules or routes of ours for no marked uplink", KindRouting},
		{"table inet external-ip: chain uplinks missing", KindRouting},
		{"table inet external-ip: map uplink-eg6 missing", KindRouting},
		{"table inet external-ip: chain uplink4-1-eth1 holds 0 rules, not the one that sets mark 0x1000000", KindRouting},
		{"table inet external-ip: map uplink-marks4 does not send mark 0x1000000 to chain uplink4-1-eth1", KindRouting},
		{"something new", KindOther},
	} {
		if got := Kind(tc.line); got != tc.kind {
			t.Errorf("%q: kind %q, want %q", tc.line, got, tc.kind)
		}
	}
}
