// Package assigner owns the reference counts of external IPs, the journal
// of each change, and the verbs: Add, Del, Check, GC, Repair, Ready, the
// status Report, the announcer's reads (WhileHeld, WhileHeldOn, Holds) and
// Retire.
//
// Its state is package store's: the records of the attachments, the index
// of each IP's holders, and the journal of the change under way, under a
// lock that every invocation takes for its whole read-modify-write. Every
// change is written to the journal before any other file or the kernel is
// touched (journal.go), then carried out step by step in a mode its entry
// point chooses (change.go: run first, undone at once, or replayed by the
// next invocation when a crash cut it short: an ADD is rolled back, a
// release finished). Only it knows the order of a change and how to undo
// it, so the journal's step kinds live here.
//
// An IP is on the holder device exactly while it has at least one holder.
// The package decides which IPs change hands and when an IP goes on or off
// the holder; it asks the floors below to do it, and they never call back:
// package host screens the IPs, chooses their uplink and puts them on the
// holder device it owns; package steer decides the rules of table inet
// external-ip (applied here, in the journal's "nat" step, through NAT);
// package uplinkroute decides and makes the routing of an IP whose uplink
// is not the default route's; package forget deletes, off the lock, the
// conntrack entries of the flows a change left behind; an Announcer
// (package announce's session) probes the LAN and announces.
//
// Each verb's work has its own type: adding (one ADD, a kind of request;
// a new kind, such as IPs claimed from a pool, is a type beside it),
// change (one journaled change), reconciling (GC and repair), reporting
// (status) and checking (CHECK). An Assigner may serve one call after
// another: what a call learns (the holder, the uplinks, the routing's
// verdicts, what it queued) is kept for that call alone (startCall).
//
// It never touches the kernel but through those packages, and never lists
// the holder's addresses on the ADD or DEL path.
package assigner
