// Package announce puts external IPs on the wire: gratuitous ARP for IPv4
// (RFC 5227 section 2.3, request and reply) and unsolicited neighbour
// advertisements for IPv6 (RFC 4861 section 7.2.6), and runs the later
// announcement rounds in a detached copy of the plugin so that they never
// hold up ADD.
//
// It only sends, and listens only for the answer to a conflict probe (RFC
// 5227 ARP probe, RFC 4862 duplicate address detection) before an address
// is first taken: callers decide what to announce or probe, on which uplink
// and when. A Session is one ADD's part: its probes, its first round, and
// the hand-over of its later rounds to detached children (a Runner in the
// child). Its packet sockets, slow to close, go to a linger.Keeper, which
// boards them on those children or keeps them otherwise; a Runner with no
// rounds is the keeper's holding child. Senders and probes work over a
// Conn, so that their
// decisions are tested without root; the raw sockets are behind Sockets.
//
// It never adds, removes or lists addresses or neighbour entries, and never
// lists the node's addresses to find a source, because listing costs
// milliseconds per thousand addresses on a node that holds many: it opens
// raw sockets bound to the one uplink and lets the kernel choose the IPv6
// source, which must be the uplink's link-local address. The one address
// it reads is the uplink's own IPv4 address that an IPv4 probe asks from,
// in a request the kernel answers with that interface's addresses alone.
// Whether an IP is still held is the caller's to say (Runner.WhileHeld).
package announce
