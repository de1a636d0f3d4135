// Package nftconn is the netlink conversation with nf_tables about one
// table of the inet family, for package nat: the library's connection,
// which stages a transaction and commits it (counting the commits), and
// the requests the library (v0.3.0) cannot make or read, each in one
// round trip: the chains' use counts (one dump of the chains), a chain's
// rules as their raw expressions, the rules per chain with a given user
// data, one element by its key, a chain filled with rules the library
// cannot encode; and the decoding of verdicts and names it leaves raw.
//
// It knows no rule, map or chain of ours and decides nothing: what the
// table holds is package nat's. Every request names the one table it was
// opened for; it touches no other.
package nftconn
