// Package standing keeps the books of IPs held in standby for the
// assigner: which of an ADD's IPs stand by (the node process said so, or
// another host answered the probe and the network stands by), the record
// that lists them apart from the active ones, whether a move of the node
// process still applies, what an IP's index entry keeps once its last
// active holder here leaves, and the drift a status report names for an
// IP held in standby only.
//
// It decides over records and index entries it is handed and never reads
// or writes the state, the holder device, the nftables table or the LAN:
// the assigner does, under its lock, and the node process (package
// standby) decides when to move an IP.
package standing
