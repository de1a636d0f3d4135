// Package store owns the state of the external IPs on disk: the state
// directory of each holder device under dataDir, its lock, and the format
// of every file in it. It decides nothing: which IPs an attachment holds,
// and what the kernel must carry, are package assigner's to decide and to
// write here.
//
// State lives under dataDir/<device>/, shared by every concurrent
// invocation of the plugin and guarded by a flock(2) on dataDir itself,
// which every invocation takes for its whole read-modify-write (a
// directory is locked, so removing a file or the device's directory cannot
// let a second invocation in). Inside dataDir every file is reached
// relative to its directory's handle, never through a symlink, and only
// from directories that no other user can write:
//
//	lock            also locked, for binaries from before the dataDir lock
//	journal         the change under way (Journal), written before any other file or
//	                the kernel is touched; the next invocation settles it
//	att/<key>.json  one Record per attachment (network, container ID, interface) -> IPs;
//	                the key is a hash, so no name from a request can build a path
//	ip/<addr>.json  per IP (IPEntry): the keys of its holders (its count) and its uplink
//	tmp/            where atomic writes are staged (fsync, then rename) and swept after a crash
//	creating-device while the holder is made: the temporary name it is made under
//	conntrack       the queue of conntrack clean-ups: the flows of targets that left
//
// It also owns the node lock (LockNode): one file, /run/external-ip/node.lock,
// outside every dataDir, for the objects all dataDirs' changes share; its
// directory is judged as a state directory is, and taken after a dataDir's
// lock, never before.
//
// A dataDir that is a system directory, or on a path that another user
// could change, is refused (ErrRefused). The journal, records and index
// entries encode themselves (stateenc.go), byte for byte as encoding/json
// would, which the tests check by reflection over every field.
package store
