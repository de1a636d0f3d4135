package upkeep

import "testing"

// The lines are the assigner's (report.go, traffic_report.go), as
// `external-ip status` prints them.
func TestEveryDriftLineHasItsKind(t *testing.T) {
	for _, tc := range []struct{ line, kind string }{
		{"192.0.2.5: held but not on eip0", KindAddress},
		{"192.0.2.5: on eip0 but held by no record", KindAddress},
		{"2001:db8::5: no proxy neighbour entry on up0", KindProxy},
		{"192.0.2.5: index lists 2 holders, records 1", KindIndex},
		{"192.0.2.5: indexed but held by no record", KindIndex},
		{"192.0.2.5: its uplink up0 is gone; the next ADD or GC chooses another", KindUplink},
		{"an interrupted change is pending in /run/x/eip0/journal; the next ADD, DEL or GC settles it", KindJournal},
		{"nftables table inet external-ip: missing", KindNAT},
		{"192.0.2.5: ingress rule to [10.0.0.2] held by no record", KindNAT},
		{"10.0.0.2: egress via up0 from 192.0.2.5 held by no record", KindNAT},
		{"10.0.0.0/24: no hairpin rule for the subnet", KindNAT},
		{"192.0.2.5: ingress steers to [10.0.0.2], the records to [10.0.0.3]", KindNAT},
		{"something new", KindOther},
	} {
		if got := driftKind(tc.line); got != tc.kind {
			t.Errorf("%q: kind %q, want %q", tc.line, got, tc.kind)
		}
	}
}
