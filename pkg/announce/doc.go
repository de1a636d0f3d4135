// Package announce puts external IPs on the wire: gratuitous ARP for IPv4
// (RFC 5227 section 2.3) and unsolicited neighbour advertisements for IPv6
// (RFC 4861 section 7.2.6), and the probes that look for another owner of an
// address before it is first taken.
//
// It only sends (and, for probes, listens): callers decide what to announce,
// on which uplink and when. It opens raw sockets bound to one interface and
// never lists addresses, because listing costs milliseconds per thousand
// addresses on a node that holds many.
package announce
