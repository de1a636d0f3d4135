// Package pools reads ExternalIPPools: a pool's ranges as IP ranges, which
// of their IPs a pool request may be given, the n-th of them and the order
// in which a request tries them, whether an IP lies in the pool, which
// namespaces and nodes a pool admits, which of several overlapping pools
// gives IPs (the oldest), and the bounds that the admission policy
// compares as strings. It is pure: it reads objects that
// others fetched, calls no API server and keeps no state, so that the node
// process, the leader and the tests agree by construction.
package pools
