// Package forget deletes, off the state lock, the conntrack entries of a
// target that left: the queue of clean-ups and its runner, which feed
// package conntrack's deletion (conntrack.Conn).
//
// A change that stops steering an IP to a target (a DEL, a re-ADD, GC's
// stray rules) queues the target here under the lock (Queue.Add,
// Queue.Leaving), once its commit has taken the rules out: from then on no
// new flow goes to it. The entries already made are deleted after the
// lock is released (Queue.Drain), by one runner at a time per state
// directory (runner.go): a detached child for ADD and DEL, GC and repair
// themselves. Finding them walks the kernel's whole conntrack hash, which
// must hold neither the node's other invocations nor the runtime, and
// happen once per drain rather than once per DEL in a storm of DELs. It is
// a best-effort clean-up, as portmap's: a failure is logged, kept in the
// queue with its error (status and CHECK report it), and retried by GC and
// repair; it never fails a change nor blocks the next one.
//
// It owns the queue file and the runner lock of a state directory
// (store.ConntrackFile, store.RunnerFile) and touches no other state file
// but to read an IP's holders; it decides nothing about which flows left
// (package steer does) and deletes nothing itself (package nat does).
package forget
