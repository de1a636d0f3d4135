package main

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/external-ip/external-ip/test/bench/ctfill"
)

// conntrackUnits add the default mode's ADD/DEL pair of each family on a
// node whose conntrack table holds -conntrack unrelated entries of each
// family, as a working node's does. A steered DEL forgets the leaving IP's
// flows, and the kernel's dump that finds them walks its whole conntrack
// hash; on the empty nodes the plugin sees that there is no entry at all
// and skips the walk, so only these rows show what it costs.
func (b *bench) conntrackUnits(res *results) (*node, error) {
	if b.opts.conntrack == 0 || b.defaultTraffic() == trafficNone {
		return nil, nil
	}
	n, err := b.newNode("ct")
	if err != nil {
		return nil, err
	}
	if err := n.ns.Do(func(ns.NetNS) error { return ctfill.Fill(b.opts.conntrack) }); err != nil {
		return nil, fmt.Errorf("filling %s's conntrack table: %w", n.name, err)
	}
	logf("%s: %d conntrack entries of each family", n.name, b.opts.conntrack)
	for i, v6 := range []bool{false, true} {
		name := fmt.Sprintf("external-ip ADD %s, traffic %s, %d conntrack entries", famName(v6), b.defaultTraffic(), b.opts.conntrack)
		b.eipPair(res, name, "held", n, "external-ip", 200+i, v6, b.defaultTraffic())
	}
	return n, nil
}
