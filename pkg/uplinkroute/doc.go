// Package uplinkroute is the policy routing that sends an external IP's
// flows out of the IP's own uplink when that uplink is not the one the
// main table's default route uses.
//
// It owns, per uplink it is asked to route (a "slot" s, 1 to slots.Config.Slots):
//
//	ip rule  pref P    not fwmark 0/M lookup main suppress_prefixlength 0   (one per family)
//	ip rule  pref P+1  fwmark s<<shift(M)/M lookup T+s                     (per slot and family)
//	table    T+s       default via GATEWAY dev UPLINK onlink                (per family with a gateway)
//
// every rule and route tagged with protocol Protocol, and it sets
// net.ipv4.conf.UPLINK.src_valid_mark to 1 so that the kernel's reverse
// path check (rp_filter) looks up a marked packet's source with its mark:
// without it, with rp_filter 1, a flow from a client behind the uplink's
// router is dropped as arriving on the wrong interface. The marks are set
// by package nat (chain "uplinks" of table inet external-ip).
//
// It also decides, for one call at a time (Router), which addresses need
// marking for which uplink (Needs, from a record's steering and its IPs'
// uplinks, which package assigner reads from the index), which uplink
// gets which slot, when a chain and its routes are made and when they go:
// a chain exists only with its routes (made after them, removed before
// them), so that an ADD that finds one trusts it. A change's plan goes
// into the NAT step's one transaction (Plan.Into) and is settled after it
// (Router.Settle); GC, CHECK and status compare what the records need
// with what the kernel has (Missing, Extra) and GC mends it (Reconcile).
// HostRouting is the Routing of the host: these rules and tables, and the
// marks over package steer's table connection.
//
// The marking and the rules and tables are the node's, shared by every
// dataDir: a change that may touch them holds the node lock
// (store.LockNode, Router.Lock) from its read of the marking until its
// routes are settled, so that two dataDirs never pick the same free slot
// nor take away a suppress rule the other's new chain needs. It is taken
// under a dataDir's lock, never the other way round.
//
// It never changes or removes a rule or route that is not tagged as its
// own, and refuses a slot whose table holds another program's routes or
// is looked up by another program's rule. It also answers the questions
// the decision needs from the main table: the default route's uplink, and
// an uplink's gateway.
package uplinkroute
