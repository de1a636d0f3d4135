// Package nat steers an external IP's traffic to and from the containers
// that hold it, with nftables over netlink.
//
// It owns exactly one nftables table, "inet external-ip", and touches no
// other table, chain or rule: iptables' tables and every other program's
// stay as they are. In it:
//
//	prerouting   nat hook, priority dstnat-10: ip daddr @ext4 add @seen4
//	             { ip daddr } (recordRule), ip daddr vmap @in4, then
//	             dnat ip to ip daddr map @dnat4 (and ip6); guarded by the maps
//	             alone, which hold only our IPs (see ingressRule)
//	output       nat hook, priority dstnat-10: the same, for the node's own connections
//	dnat4        each external IP with one target : its target (most IPs)
//	in4          each external IP with several targets : goto to-<ip>
//	postrouting  nat hook, priority srcnat-10:
//	             ip saddr . ip daddr != @nosnat4 snat ip to ip saddr .
//	             oifname map @snat4 (and ip6), recording the container
//	             address in @seen4, then
//	             ct status dnat ip saddr . ip daddr @hp4 ct original ip daddr @ext4
//	             masquerade (hairpin of flows to our IPs only; sent raw, see rawRules)
//	to-<ip>      one regular chain per external IP with several targets:
//	             dnat ip to numgen inc mod N map @sp-<ip>
//	sp-<ip>      the spread map of an IP with several targets: 0 : a, 1 : b, ...
//	seen4, seen6 the external IPs that had a flow DNATed and the container
//	             addresses that had one SNATed: a DEL cleans conntrack up only
//	             for those (Seen, Unsee; the rules record before they DNAT)
//	hp4, hp6     the container subnets, each as subnet . subnet, for the hairpin rule
//	nosnat4, nosnat6
//	             container subnet . destination for each network's
//	             egressExcludedCIDRs: flows neither SNATed nor marked for
//	             an uplink (notExcluded)
//	ext4, ext6   the external IPs with ingress targets, for the hairpin rule
//
// A fourth base chain, uplinks (filter, prerouting, mangle), marks the
// flows of external IPs whose uplink is not the default route's, through
// a chain per routed uplink and family and three verdict maps per family
// (uplinks.go). Every rule of the base chains carries the comment
// "external-ip layout N" (layoutTag), and the table holds an empty chain
// layout-N-MASK (layoutChain, MASK the uplink marking's bits), made
// last: an ADD that steers tells a table made by an earlier version, or whose making was cut short, and a base chain with
// rules added or taken away, from one dump of the chains, by the marker
// and by each base chain's use count, which is its number of rules (a
// flushed chain reads 0, and one dump of the rules then says so).
//
// Every map is keyed by external IP or by container address (the hairpin
// and exclusion sets by container subnet, their elements' arithmetic in
// package intervals), so that a change costs the same with 1 or
// 1,000 attachments: an external IP's change rewrites only its own
// element (and chain, if it has several targets). One target is a data
// map's element, not a goto to a chain: a commit that adds a goto or a NAT
// rule has the kernel validate every chain the base chains reach, which
// made each ADD cost O(IPs). The chains run
// before the standard NAT priorities because the first NAT binding of a
// flow wins: ours must bind before iptables' nat chains (priority 100 in
// postrouting) where the bridge plugin's ipMasq and kube-proxy masquerade.
//
// The code has three parts. Table holds the steering's elements and
// chains (apply.go, change.go: one attachment's change in one
// transaction) and the fixed part (skeleton.go: the maps, the base chains
// and their rules, the layout marker); the uplink marking is a type of
// its own (marking, uplinks.go and legacy.go), which Table embeds, and so
// is the reading back for CHECK, GC, repair and status (reading,
// read.go). Every request goes through package nftconn, which holds the
// connection and the requests the nftables library cannot make.
//
// It decides nothing: which IP goes to which container is the caller's
// (package steer's) decision; deleting the conntrack entries of flows
// that left is package conntrack's.
package nat
