// Package assigner owns the reference counts of external IPs and the holder
// device that carries them.
//
// Its state is package store's: the records of the attachments, the index
// of each IP's holders, and the journal of the change under way, under a
// lock that every invocation takes for its whole read-modify-write. Every
// change is written to the journal before any other file or the kernel is
// touched, so that the next invocation settles one that a crash
// interrupted: an ADD is rolled back, a release finished. The conntrack
// clean-ups of targets that left are queued there too (forget.go), run off
// the lock, best effort, and retried by GC.
//
// An IP is on the holder device exactly while it has at least one holder.
// The package decides: which IPs change hands, where each is announced (the
// uplink), and when an address goes on or off the device. It never adds or
// removes an address on any interface but the holder, never manages a device
// it did not create (marked by its alias, which names the dataDir that owns
// it: a second dataDir on the same device is refused), never adopts a device
// on the strength of a marker (the holder is made under a temporary name
// and renamed once marked), and never lists addresses on the
// ADD or DEL path (CHECK only to confirm an IP the FIB does not yet show),
// because listing costs milliseconds per thousand addresses. Sending announcements is package announce's job.
//
// It also decides each external IP's steering (traffic*.go): its ingress
// targets (the holders' container addresses), each holder's egress source
// and hairpin rule, kept in the record with the container's addresses.
// The decisions are pure functions of the records and the change
// (traffic_plan.go); the journal's "nat" step applies their result through
// the NAT interface. One comparison of the wanted and the actual table
// (traffic_compare.go) serves GC and repair (which apply it), status (which
// reports it) and CHECK (which fails on it). Package nat only writes the
// nftables table and conntrack.
//
// An Assigner may serve one call after another: what a call learns (the
// holder, the uplinks, what an ADD put on the kernel) is kept for that call
// alone.
package assigner
