// Package install puts external-ip on a Kubernetes node and keeps it there:
// it copies the plugin binary into the CNI bin dir, chains the plugin's
// entry into the primary network config that the runtime picks, keeps it
// chained while the primary CNI rewrites its file, and undoes all of it.
//
// It owns, and writes only:
//
//	BIN/external-ip                 the plugin binary (temp file in BIN, fsync, rename)
//	CONF/<primary>                  our entry appended to the primary's plugin list;
//	                                a single-plugin .conf or .json becomes <name>.conflist
//	CONF/.external-ip/undo.json     what each change replaced, byte for byte
//	CONF/.external-ip/binary.orig   a copy of the binary that was in BIN before ours
//	CONF/.external-ip/uninstalled   uninstall's mark, which a running watcher obeys
//	CONF/.external-ip/watching      the file each running watcher holds a shared flock on
//
// and, on uninstall only, removes the holder devices of the plugin's
// dataDir and table inet external-ip when they are ours and empty. It
// writes the dataDir's state only through the assigner, as GC does, to
// release the records of pods whose network namespace is gone without
// their DEL: while other pods hold external IPs there, uninstall changes
// nothing else (unless forced), since on containerd their DELs reach the
// plugin only through the entry chained now.
//
// The primary is the file libcni loads first, by libcni's own code (its
// verbatim copy in internal/cniconf, since the plugin binary must not link
// libcni); a primary we cannot chain into (a symlink, a CNI 1.1 list with
// plugins in its subdirectory) is refused by name, never passed over. A
// file before it that does not load is passed over as libcni passes over
// it, unless it changed a moment ago: then it may be half-written by a
// primary that writes in place, and install waits for it (settleBroken).
//
// The undo file lives in a hidden directory of the conf dir, not in the
// plugin's state dir: the conf dir is what it undoes and, unlike the state
// dir (tmpfs, gone at reboot), it persists as long as the changes do.
// Runtimes list only the conf dir's files (libcni's ConfFiles skips
// directories), so they never read it. Every change is recorded there
// before it is made, so Uninstall restores the conf dir byte for byte (mode,
// owner and mtime too) and removes the binary, or puts back the one that
// was there before ours, after a kill at any instant.
// A file that someone else changed after we wrote it is theirs: Uninstall
// leaves it alone. When the primary rewrites its file and Install chains it
// again, the primary's new version becomes the one Uninstall restores.
// Every change goes in only over the bytes it was planned from, read again
// right before the rename: a file the primary rewrote meanwhile is planned
// again from its new version, never replaced by one made from the old.
//
// The node's upkeep (re-announcing, repairing), run by the same process, is
// package upkeep's. This package never touches another file of the conf
// dir, never follows a symlink there, and never removes a file it did not
// write.
package install
