// Package sink keeps the netfilter sockets of finished CNI invocations
// open in one long-lived process per dataDir, and closes them only once
// no invocation has handed it one for a while (Options.Quiet).
//
// Why: the kernel's release of a netfilter netlink socket takes its
// network namespace's nf_tables commit lock and, holding it, waits for
// the namespace's destroy work, which frees what a commit deleted after
// an RCU grace period (nft_rcv_nl_event; 6.6 ms at the median with the
// kernel's default rcu_expedited=0). Every invocation releases one
// socket; under churn (a pod replacing another, a rollout) some DEL's
// destroy work is pending whenever one is released, and the next ADD's
// commit waits for the lock: one steered ADD in eight did, 8.4 ms each
// (docs/performance.md, "A pod that replaces another"). Parking the socket
// (package park) only moves the release past the exit, into the middle of
// the next invocations. The sink releases none while calls keep coming,
// and all at once in the first quiet moment, when no destroy work is left.
//
// Give hands sockets over in one datagram, without waiting; Start starts
// the sink of a dataDir that has none, as a detached child of this binary
// (EnvDir) that inherits the sink's lock, so that one runs at most; Serve
// is that child's loop, which exits once it has held nothing for
// Options.Idle. The sink owns dataDir/sink.sock and dataDir/sink.lock and
// nothing else: it never reads what it holds.
package sink
