// Package linger owns one rule: a socket whose last close is slow is
// closed only after the runtime has seen the plugin exit, so that the
// kernel's wait falls on nobody's ADD, DEL or GC.
//
// Two kinds of socket are slow to release. An AF_PACKET socket's release
// waits for an RCU grace period (synchronize_net). A netfilter netlink
// socket's release waits for the nf_tables destroy worker of its network
// namespace, which frees what a commit deleted after a grace period, if
// any commit of anyone's left it pending: a pod's ADD that follows its
// predecessor's DEL would wait for that DEL's worker. Callers say what a
// socket is (Packet, Netfilter); a Keeper decides how it outlives the
// plugin: a netfilter socket in the dataDir's sink if one takes it
// (package sink: a process that releases nothing while calls keep
// coming, since a release then holds the commit lock through another
// DEL's destroy work), else, like every other, in a detached child that
// the plugin starts anyway (Board: the announcer of the later rounds),
// else parked in the kernel (package park), else in a child started only
// to hold it.
// Every child that inherits sockets is told through a pipe when the
// plugin has closed its own copies, so that the child's close is the last.
//
// It opens no socket and knows no protocol: it only copies (Dup), holds,
// hands over and closes the sockets and files it is given.
package linger
