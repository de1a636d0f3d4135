// Package assigner owns the reference counts of external IPs and the holder
// device that carries them.
//
// State lives on disk under dataDir/<device>/, shared by every concurrent
// invocation of the plugin and guarded by one file lock per device:
//
//	lock            the flock(2) every invocation takes for its whole read-modify-write
//	journal         the change under way, written before any other file or the kernel
//	                is touched; the next invocation replays it, so a crash at any
//	                instant is repaired
//	att/<key>.json  one record per attachment (network, container ID, interface) -> IPs;
//	                the key is a hash, so no name from a request can build a path
//	ip/<addr>.json  per IP: the keys of its holders (its count) and its uplink
//	tmp/            where atomic writes are staged before rename
//
// An IP is on the holder device exactly while it has at least one holder.
// The package decides: which IPs change hands, where each is announced (the
// uplink), and when an address goes on or off the device. It never adds or
// removes an address on any interface but the holder, never manages a device
// it did not create (marked by its alias), and never lists addresses on the
// ADD, DEL or CHECK path, because listing costs milliseconds per thousand
// addresses. Sending announcements is package announce's job.
package assigner
