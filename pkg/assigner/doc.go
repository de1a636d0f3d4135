// Package assigner owns the reference counts of external IPs and the holder
// device that carries them.
//
// State lives on disk under dataDir/<device>/, shared by every concurrent
// invocation of the plugin and guarded by a flock(2) on dataDir itself, which
// every invocation takes for its whole read-modify-write (a directory is
// locked, so removing a file or the device's directory cannot let a second
// invocation in). Inside dataDir every file is reached relative to its
// directory's handle, never through a symlink, and only from directories
// that no other user can write:
//
//	lock            also locked, for binaries from before the dataDir lock
//	journal         the change under way, written before any other file or the kernel
//	                is touched; the next invocation settles it, so a crash at any
//	                instant is repaired: an ADD is rolled back, a release finished
//	att/<key>.json  one record per attachment (network, container ID, interface) -> IPs;
//	                the key is a hash, so no name from a request can build a path
//	ip/<addr>.json  per IP: the keys of its holders (its count) and its uplink
//	tmp/            where atomic writes are staged before rename
//	creating-device while the holder is made: the temporary name it is made under
//	conntrack       the queue of conntrack clean-ups (forget.go): the flows of targets
//	                that left, deleted off the lock, best effort, retried by GC
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
// and hairpin rule, kept in the record with the container's addresses and
// carried out as the journal's "nat" step through the NAT interface;
// package nat only writes the nftables table and conntrack.
package assigner
