// Package localpool decides the node-local pools of the plugin's config
// (key pools), for runtimes with no cluster behind them (podman,
// containerd alone, cnitool): which free IP of a pool an ADD is given, and
// who may hold an IP that lies in a pool.
//
// Every IP of a pool belongs to one owner at a time: the owner of the
// attachment that took it (OwnerOf: the pod's namespace when the runtime
// names one, else the network). An IP given from a pool is held by that
// attachment alone; another attachment of the same owner may name it and
// share it; an attachment of another owner is refused, naming the owner.
// The IP is free again once its last holder's record is gone.
//
// It keeps no state of its own: ownership is the records' (store.Record's
// Owner and Owned), written by package assigner in the ADD's journaled
// change, under the lock in which Rules.Check has just read the state. It
// reads the state through store.Reader and never writes it; it touches no
// kernel object.
package localpool
