package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// A second uplink on a node of its own: uplink1 to a second LAN, on
// 203.0.113.0/24 and 2001:db8:5::/64, with a default route of each family
// of a higher metric than uplink0's, as a second NIC's DHCP client makes
// it. An IP there needs our policy routing; one on uplink0 does not.
const (
	up1Range4 = "203.0.113.0/24"
	up1Range6 = "2001:db8:5::/64"
)

// uplinkUnits add, for each family, the ADD/DEL pair of an IP on the
// default route's uplink and of one on the second uplink, on the same
// node; on the second uplink once as its first IP (the ADD makes the
// uplink's mark, rule and table, the DEL removes them) and once, on a
// second node, beside an IP held there by another attachment (only set
// elements change), with its own default-route row. Each second-uplink
// pair is one unit with its default-route pair (adjacent).
func (b *bench) uplinkUnits(res *results) error {
	if b.defaultTraffic() == trafficNone {
		return nil
	}
	n, err := newUplinkNode(b, "up")
	if err != nil {
		return err
	}
	for i, v6 := range []bool{false, true} {
		fam := famName(v6)
		res.units = append(res.units, b.adjacent(
			b.uplinkPair(res, fmt.Sprintf("external-ip ADD %s, traffic both%s", fam, firstDefault), n, 300+i, func(it int) string { return scenarioIP(250+i, it, v6) }),
			b.uplinkPair(res, fmt.Sprintf("external-ip ADD %s, traffic both%s", fam, firstSecond), n, 310+i, func(it int) string { return up1IP(1, it, v6) })))
	}
	m, err := newUplinkNode(b, "up2")
	if err != nil {
		return err
	}
	for i, v6 := range []bool{false, true} {
		if x := b.execIn(m, b.uplinkCall("ADD", m, 330+i, up1IP(3, -1000, v6))); x.err != nil {
			return fmt.Errorf("holding an IP on %s's second uplink: %w", m.name, x.err)
		}
	}
	for i, v6 := range []bool{false, true} {
		fam := famName(v6)
		res.units = append(res.units, b.adjacent(
			b.uplinkPair(res, fmt.Sprintf("external-ip ADD %s, traffic both%s", fam, besideDefault), m, 340+i, func(it int) string { return scenarioIP(252+i, it, v6) }),
			b.uplinkPair(res, fmt.Sprintf("external-ip ADD %s, traffic both%s", fam, besideSecond), m, 320+i, func(it int) string { return up1IP(2, it, v6) })))
	}
	return nil
}

// The uplink rows' names end in these. Each row on the second uplink is
// compared with the row on the default route's uplink of the same node,
// verb and family (uplinkBaseline), run adjacent to it (adjacent) and
// stated as their paired difference (pairedDiff): the first IP's on node
// up, another IP's on node up2, where an IP held on the second uplink
// keeps it routed and makes every DEL read its marks.
const (
	firstDefault  = ", default route's uplink"
	firstSecond   = ", second uplink, first IP on it"
	besideDefault = ", default route's uplink, an IP held on the second uplink"
	besideSecond  = ", second uplink, another IP held on it"
)

// uplinkBaseline is the row a second-uplink row is compared with, and
// the goal it is held to: +0.3 ms is the most an IP on a
// second uplink may cost (the row of another IP held there); the uplink's first IP
// of a family also makes its routes and chain (and its DEL removes them),
// once per uplink and family as the first steered ADD makes the table,
// and is shown against no goal (docs/uplinks.md, "Cost"). False for any
// other row.
func uplinkBaseline(name string) (base, goal string, ok bool) {
	if base, ok := strings.CutSuffix(name, besideSecond); ok {
		return base + besideDefault, "<= +0.3 ms", true
	}
	if base, ok := strings.CutSuffix(name, firstSecond); ok {
		return base + firstDefault, "none: once per uplink and family", true
	}
	return "", "", false
}

// up1IP is the second uplink's IP of scenario s at iteration it.
func up1IP(s, it int, v6 bool) string {
	if v6 {
		return fmt.Sprintf("2001:db8:5::%x:%x", s, it+1000)
	}
	return fmt.Sprintf("203.0.113.%d", s*60+(it+1000)%60+1)
}

func (b *bench) uplinkPair(res *results, add string, n *node, s int, ip func(int) string) timed {
	k := 1_000_000 + s
	a4, _ := containerAddrs(k)
	return b.pairUnit(res, add, "held", n, func(it int) call { return b.uplinkCall("ADD", n, k, ip(it)) }, a4)
}

// adjacent is one unit of a row's pair and its baseline's, run one after
// the other: the machine's state is then much the same for both (one
// invocation here varies by 2-3 ms between quartiles, far more than the
// 0.3 ms goal), and their difference per round is the estimate
// (pairedDiff). Each iteration runs -uplink-rounds rounds, numbered
// it*rounds+k in the samples (differences this small need more samples
// than the other rows); which of the two goes first alternates with
// it+k, so that each is as often the unit's first, coming after another
// scenario, as its second, whatever the number of rounds. Both units'
// rows then take that many samples per iteration.
func (b *bench) adjacent(base, row timed) unit {
	rounds := b.opts.uplinkRounds
	perIteration(rounds, base.rows...)
	perIteration(rounds, row.rows...)
	return func(it int) {
		if it < 0 { // warm-up
			base.run(it)
			row.run(it)
			return
		}
		for k := range rounds {
			r := it*rounds + k
			if (it+k)%2 == 0 {
				base.run(r)
				row.run(r)
				continue
			}
			row.run(r)
			base.run(r)
		}
	}
}

// uplinkCall is eipCall with both uplinks' ranges allowed.
func (b *bench) uplinkCall(command string, n *node, k int, ip string) call {
	var conf map[string]any
	json.Unmarshal(eipConf(n, k, trafficBoth, ip), &conf)
	conf["allowedRanges"] = []string{range4, range6, up1Range4, up1Range6}
	stdin, _ := json.Marshal(conf)
	return call{bin: b.bins["external-ip"], command: command, containerID: fmt.Sprint("c", k), ifName: "eth0", netns: n.podPath(), stdin: stdin}
}

// newUplinkNode makes a node with a second uplink.
func newUplinkNode(b *bench, tag string) (*node, error) {
	n, err := b.newNode(tag)
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("sh", "-ec", n.secondUplinkScript()).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("giving %s a second uplink: %v: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	return n, nil
}

// secondUplinkScript gives n uplink1 to a LAN of its own and the default
// routes (uplink0's first).
func (n *node) secondUplinkScript() string {
	return strings.NewReplacer("NODE", n.name, "LAN", n.lan+"2").Replace(`
ip netns add LAN; ip -n LAN link set lo up
ip -n NODE link add uplink1 type veth peer name lan1 netns LAN
ip netns exec NODE sysctl -qw net.ipv6.conf.uplink1.accept_dad=0 net.ipv6.conf.uplink1.forwarding=1
ip -n NODE addr add 203.0.113.1/24 dev uplink1; ip -n NODE addr add 2001:db8:5::1/64 dev uplink1 nodad
ip -n LAN addr add 203.0.113.254/24 dev lan1; ip -n LAN addr add 2001:db8:5::fe/64 dev lan1 nodad
ip -n NODE link set uplink1 up; ip -n LAN link set lan1 up
ip -n NODE route add default via 192.0.2.2 dev uplink0 metric 100
ip -n NODE -6 route add default via 2001:db8:1::2 dev uplink0 metric 100
ip -n NODE route add default via 203.0.113.254 dev uplink1 metric 200
ip -n NODE -6 route add default via 2001:db8:5::fe dev uplink1 metric 200`)
}
