// Package park keeps open files whose last close is slow until after this
// process has exited, without a process to hold them: it registers them in
// an io_uring's file table and leaves the ring to the kernel. It is the
// cheapest of the ways a linger.Keeper keeps a socket past the exit.
//
// Why: the release of an AF_PACKET socket waits for an RCU grace period
// (synchronize_net), and so does that of a netfilter netlink socket while
// an nf_tables commit's clean-up is pending. Done by the plugin, either
// wait sits on the runtime's ADD or DEL; a detached child that inherits
// the sockets moves it off, at the cost of a fork and exec. A ring's file
// table does the same for much less (a holding child instead cost 3.2 to
// 5.2 ms more per ADD and DEL end to end, A/B in a slow run;
// docs/performance.md, "Figures behind design choices"): when the process
// exits, the kernel tears the ring down in a workqueue, so the files'
// last references go, and the slow release runs, in a kernel worker after
// the runtime has seen the plugin exit.
//
// The ring is never used for I/O: it is created with one entry, given the
// files and left open, close-on-exec, until the exit closes it. Where
// io_uring is unavailable (kernel.io_uring_disabled, a seccomp filter) or
// the kernel is older than 5.17 (whose file registration may itself wait a
// grace period), Files fails and leaves the files to the caller, whose
// fallback is the holding child. It owns no other state.
package park
