// Package traffic names which of an external IP's flows are steered: the
// `traffic` key of the network config, and what an attachment's record
// keeps of it. It is a leaf, so that package config parses the key
// without linking the nftables library that package nat steers with. It
// owns no state and touches nothing.
package traffic
