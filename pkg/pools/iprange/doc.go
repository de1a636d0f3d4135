// Package iprange reads a pool's ranges (a CIDR or first-last, both
// families): which IPs they cover, which of them a pool request may be
// given and the n-th of them, overlaps, the classes of address no pool may
// cover, and the keys the admission policy compares. It links nothing but
// netipx, so that the plugin, which every CNI call starts, can read the
// node-local pools of its config with the very code the node process reads
// ExternalIPPools with (package pools).
package iprange
