// Package standbyrows is the bench's standby rows: what standing by costs
// an ADD, how fast a standby takes an IP over, and what its checks send
// on the LAN. Each row runs on a pair of its own: two node namespaces
// whose uplinks share one LAN bridge with a client (the LAN namespace),
// as test/netns's standby tests make them; node 1 holds the IP actively,
// node 2 in standby, each node's process (`external-ip install --watch`)
// watching.
//
// It owns the pairs (their namespaces, node processes and scratch
// directory), the faults, and what it measures from the LAN: the client's
// first answer from the standby after a fault, and the frames counted on
// the LAN's ports. The bench owns the timing of the plugin's ADD and DEL,
// the iterations and the report, and lends them through Bench. It touches
// no namespace but those it made.
package standbyrows
