package report

import "strings"

// Kinds of drift, the label of external_ip_repairs_total.
const (
	KindAddress = "address" // an IP missing from the holder (as an address, or held as a route its route), or there with no holder
	KindProxy   = "proxy"   // a proxy neighbour entry: an IPv6 IP's, or an IP's held as a route
	KindNAT     = "nat"     // table inet external-ip
	KindIndex   = "index"   // the per-IP index disagrees with the records
	KindJournal = "journal" // an interrupted change was finished
	KindUplink  = "uplink"  // an IP's uplink is gone
	KindRouting = "routing" // the routing of an uplink that is not the default route's
	KindOther   = "other"
)

// kinds maps the words of the assigner's drift lines (Report.Drift,
// as `external-ip status` prints them) to kinds, first match wins: the
// lines are prose for a person, and this keeps the reading of them in one
// place, tested against the assigner's own output.
var kinds = []struct{ word, kind string }{
	// An IP held as a route is on the holder by its route (report.go):
	// first, since a device or dataDir named in these lines may hold any
	// word below.
	{"has no route to it with protocol", KindAddress},
	{"held as a route but also an address of", KindAddress},
	{"carries addresses or routes", KindAddress},
	{"interrupted change", KindJournal},
	// The uplink routing's lines (uplinkroute's reconcile.go and
	// routes.go) name a slot, a rule, a table's gateway, the marking or
	// its chains and maps (nat's uplinks.go).
	{"slot", KindRouting},
	{"rule pref", KindRouting},
	{"routes by", KindRouting},
	{"marked for routing", KindRouting},
	{"chain uplink", KindRouting},
	{"map uplink-", KindRouting},
	{"proxy neighbour", KindProxy},
	{"nftables", KindNAT},
	{"ingress", KindNAT},
	{"egress", KindNAT},
	{"hairpin", KindNAT},
	{"index", KindIndex},
	{"its uplink", KindUplink},
	{"held but not on", KindAddress},
	{"held by no record", KindAddress},
}

// Kind is the kind of one line of Report.Drift.
func Kind(line string) string {
	for _, k := range kinds {
		if strings.Contains(line, k.word) {
			return k.kind
		}
	}
	return KindOther
}
