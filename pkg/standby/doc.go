// Package standby is the node process's watch of the IPs held in standby
// (the network key `standby: true`): it checks on the LAN that the active
// holder still answers, takes an IP over when it does not (or when the
// active says goodbye), and gives an active IP up when another node
// answers for it too, or when its uplink goes down.
//
// A check is the question a node asks to resolve the IP: an ARP request
// from the uplink's own IPv4 address, or a neighbour solicitation from its
// link-local address, sent to the active holder's MAC (learned from its
// last answer), and broadcast (multicast) only while that MAC is unknown
// or has just missed. So the LAN carries one frame each way per check
// period and IP, and no host but the active hears them. Misses in a row
// mean the active is gone: the watcher takes the IP over through the
// assigner (an ADD that moves the records, Moves) and announces it. No
// API server is asked: a partitioned control plane must not block it.
//
// It owns no file, device or rule: every change goes through package
// assigner, as an ADD of a record that exists (assigner.Options.Move).
// The frames it sends and reads go through a Port, so that the decisions
// are tested without root; a Claims, when given, is told of every
// takeover and yield, and its claim naming the active node (Kubernetes)
// decides between two nodes that both answer for an IP, unless it names
// a node this one took the IP over from and the other is not that node:
// then the MAC rule does, as with no claim. It never sends
// a frame that teaches a neighbour anything untrue: its checks ask from
// the node's own addresses, and only a takeover announces.
package standby
