// Package steer decides each external IP's steering: its ingress targets
// (the holders' container addresses), each holder's egress source and
// hairpin rule, kept in the attachment's record (Decide); what a change of
// attachment does to table inet external-ip and which flows it leaves
// behind (PlanChange); and one comparison of the table the records want
// with the table the kernel has (Compare), which GC and repair apply
// (Mend, through NAT), status reports (Diff.Drift) and CHECK fails on
// (Check). But Mend, these are pure functions of the records and the
// change: they read no file and touch no kernel. A new kind of rule is decided and compared here, in one place.
//
// It also holds the host's side of the table as the steering asks it
// (NAT, and HostTable over package nat), which opens its netlink sockets
// on first use. It never decides who holds an IP (package assigner's
// reference counts), never writes a state file, and never touches a
// table, chain or rule but those package nat owns.
package steer
