// Package conntrack deletes the conntrack entries of flows that package
// nat's rules steered, over a ctnetlink socket of its own: those DNATed to
// a target that left (ForgetTarget), and those DNATed from or SNATed to an
// IP that left the node (ForgetIP), so that a client starts a new flow,
// which the remaining holders get, instead of sending into the void.
//
// It deletes only entries that carry our NAT: their status has the NAT
// bit and their tuples name the IP (and target) given. Every other entry,
// another program's NAT included, stays. It decides nothing: which flows
// left is the caller's (package forget queues the clean-ups a steering
// plan says are due).
package conntrack
