package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// series is one row of the table: the samples of one kind of invocation.
type series struct {
	name  string
	verb  string // ADD, DEL or exec: the ratio column compares like verbs
	group string // reference, external-ip, held: the plot's colours
	// rounds is the samples an iteration records, numbered
	// it*rounds+round, as the unit that records them runs (adjacent,
	// churn): a paired interval resamples whole iterations.
	rounds  int
	samples []sample
	fails   int
}

func (s *series) record(x sample, it int) {
	if x.err != nil {
		s.fails++
		logf("FAIL %s: %v", s.name, x.err)
		return
	}
	if it >= 0 { // warm-up iterations are not recorded
		x.it, x.stdout, x.stderr = it, nil, nil
		s.samples = append(s.samples, x)
	}
}

// unit is what one iteration runs for a scenario: an ADD and its DEL, which
// stay in that order while the units are shuffled.
type unit func(it int)

// timed is a unit and the rows it records, for a runner that runs it
// more than once per iteration (adjacent) to say so.
type timed struct {
	run  unit
	rows []*series
}

// perIteration states that rows take rounds samples per iteration.
func perIteration(rounds int, rows ...*series) {
	for _, s := range rows {
		s.rounds = rounds
	}
}

type results struct {
	rows   []*series
	byName map[string]*series
	units  []unit
	tables []string // printed after the comparisons: the standby rows' check traffic
	// phase names a run of a group's rows after the main one ("pools",
	// "standby"): its plot and samples are benchmark-PHASE.*.
	phase string
}

// add makes a row of one sample per iteration; a unit that records more
// says so (perIteration).
func (r *results) add(name, verb, group string) *series {
	s := &series{name: name, verb: verb, group: group, rounds: 1}
	r.rows = append(r.rows, s)
	r.byName[name] = s
	return s
}

// Traffic modes of the rows; "" leaves the key out of the config.
const (
	trafficNone = "none"
	trafficBoth = "both"
	// trafficBothAddress steers, holding the IP as an address rather than
	// as a route (the default when steered): the row to hold route mode's
	// cost against, in the same run.
	trafficBothAddress = "both, hold address"
)

// containerAddrs are the container's addresses of attachment k, as the main
// plugin reported them: distinct per attachment, because steering maps
// each external IP to its container's own address.
func containerAddrs(k int) (v4, v6 string) {
	return addrPlus("10.64.0.0", k).String() + "/10", addrPlus("fd00:64::", k).String() + "/64"
}

// prevResult is what a main plugin (bridge with host-local) hands on: the
// container's interface in its sandbox and its addresses.
func prevResult(n *node, k int, v6 bool) json.RawMessage {
	a4, a6 := containerAddrs(k)
	ips := []map[string]any{{"interface": 0, "address": a4}}
	if v6 {
		ips = append(ips, map[string]any{"interface": 0, "address": a6})
	}
	b, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"interfaces": []map[string]any{{"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": n.podPath()}},
		"ips":        ips,
	})
	return b
}

// eipConf is the plugin's network config: state on the tmpfs, the
// requested IPs through runtimeConfig (libcni's capability path), announce
// count 1 and conflictProbe 0s, so that neither a probe window nor later
// rounds are timed.
func eipConf(n *node, k int, traffic string, ips ...string) []byte {
	conf := map[string]any{
		"cniVersion":    "1.0.0",
		"name":          "bench",
		"type":          "external-ip",
		"dataDir":       n.dataDir,
		"allowedRanges": []string{range4, range6},
		"announce":      map[string]any{"count": 1},
		"conflictProbe": "0s",
		"prevResult":    prevResult(n, k, true),
		"runtimeConfig": map[string]any{"externalIPs": ips},
	}
	if traffic != "" {
		t, hold, ok := strings.Cut(traffic, ", hold ")
		conf["traffic"] = t
		if ok {
			conf["hold"] = hold
		}
	}
	b, _ := json.Marshal(conf)
	return b
}

func (b *bench) eipCall(bin, command string, n *node, k int, traffic string, ips ...string) call {
	if !b.trafficKey {
		traffic = "" // the plugin predates the key and refuses it
	}
	return call{
		bin: bin, command: command, containerID: fmt.Sprint("c", k), ifName: "eth0",
		netns: n.podPath(), stdin: eipConf(n, k, traffic, ips...),
	}
}

// addrPlus counts up from a base address, in its last 32 bits.
func addrPlus(base string, i int) netip.Addr {
	b := netip.MustParseAddr(base)
	a := b.As16()
	binary.BigEndian.PutUint32(a[12:], binary.BigEndian.Uint32(a[12:])+uint32(i))
	if b.Is4() {
		return netip.AddrFrom16(a).Unmap()
	}
	return netip.AddrFrom16(a)
}

// scenarioIP is the external IP of scenario s at iteration it: a new one
// each time, outside every held range.
func scenarioIP(s, it int, v6 bool) string {
	if v6 {
		return fmt.Sprintf("2001:db8:1::a:%x:%x", s, it+1000)
	}
	return fmt.Sprintf("198.19.%d.%d", s, (it+1000)%250+1)
}

// run is the whole benchmark: nodes, the interleaved iterations, the
// profiles, then the report.
func (b *bench) run() error {
	switch {
	case b.opts.poolsOnly:
		return runOnly(b, poolUnits)
	case b.opts.standbyOnly:
		return runOnly(b, standbyUnits)
	}
	res, n0, err := emptyNode(b)
	if err != nil {
		return err
	}
	np, err := b.newNode("np")
	if err != nil {
		return err
	}
	b.referenceUnits(res, n0, np)
	b.eipUnits(res, n0, np)
	churn, err := newChurn(b, res)
	if err != nil {
		return err
	}
	if err := addAB(b, res); err != nil {
		return err
	}
	var ct *node
	if !b.opts.churnOnly {
		err = b.heldUnits(res)
		if err == nil {
			ct, err = b.conntrackUnits(res)
		}
		if err == nil {
			err = b.uplinkUnits(res)
		}
		if err != nil {
			return err
		}
	}
	b.iterate(res)
	if err := b.profiles(n0, churn); err != nil {
		return err
	}
	if err := b.report(res); err != nil {
		return err
	}
	if ct != nil {
		if err := b.concurrency(ct, res.regime()); err != nil {
			return err
		}
	}
	return b.laterPass(res, n0)
}

// laterPass runs the pool and standby rows in a second pass beside every
// main unit, as before: their control plane, running beside the main
// rows, widened their tails (docs/performance.md, "How it measures").
// Of the main rows it reports only their references.
func (b *bench) laterPass(res *results, n0 *node) error {
	if b.opts.churnOnly || !(b.opts.pools || b.opts.standby) {
		return nil
	}
	main, tables := len(res.rows), len(res.tables)
	for _, s := range res.rows {
		s.samples, s.fails = nil, 0
	}
	if b.opts.pools {
		if err := poolUnits(b, res, n0); err != nil {
			return err
		}
	}
	if b.opts.standby {
		if err := standbyUnits(b, res, n0); err != nil {
			return err
		}
	}
	fmt.Println("\n## The pool and standby rows, in a second pass beside the main rows")
	b.iterate(res)
	refs := []string{floorRow, "host-local ADD", "host-local DEL", eipRow("ADD", "IPv4", b.defaultTraffic()), eipRow("DEL", "IPv4", b.defaultTraffic())}
	out := &results{byName: map[string]*series{}, phase: "pools-standby", tables: res.tables[tables:]}
	for i, s := range res.rows {
		if i >= main || slices.Contains(refs, s.name) {
			out.rows, out.byName[s.name] = append(out.rows, s), s
		}
	}
	return b.report(out)
}

// emptyNode makes the results and the empty node n0, checked by sanity.
func emptyNode(b *bench) (*results, *node, error) {
	n0, err := b.newNode("n0")
	if err == nil {
		err = b.sanity(n0)
	}
	return &results{byName: map[string]*series{}}, n0, err
}

// iterate runs every unit once per iteration, in a new order each time, so
// that machine noise falls on all of them alike.
func (b *bench) iterate(res *results) {
	o := b.opts
	rng := rand.New(rand.NewPCG(o.seed, 0x6569702d62656e63))
	logf("%d iterations (after %d of warm-up) of %d scenarios, shuffled (seed %d)", o.n, o.warmup, len(res.units), o.seed)
	tick := time.Now()
	for it := -o.warmup; it < o.n; it++ {
		for _, k := range rng.Perm(len(res.units)) {
			res.units[k](it)
		}
		if it >= 0 && (it+1 == o.n || (it+1)%20 == 0 || time.Since(tick) > 15*time.Second) {
			tick = time.Now()
			logf("iteration %d/%d: p50 so far: host-local ADD %s, external-ip ADD IPv4, traffic "+b.defaultTraffic()+" %s",
				it+1, o.n, ms(p(res.byName["host-local ADD"], 50)), ms(p(res.byName[eipRow("ADD", "IPv4", b.defaultTraffic())], 50)))
		}
	}
}

// referenceUnits: the exec floor and host-local on n0, portmap on both
// backends on np: each portmap call closes its netfilter sockets as it
// exits, which would hold the commit lock through the destroy work of
// external-ip's DELs on n0 and make its next commit wait.
func (b *bench) referenceUnits(res *results, n0, np *node) {
	floor := res.add(floorRow, "exec", "reference")
	res.units = append(res.units, func(it int) {
		c := b.eipCall(b.bins["floor"], "ADD", n0, 1, trafficNone, "198.19.0.1")
		x := b.execIn(n0, c)
		if x.err == nil && !bytes.Equal(x.stdout, c.stdin) {
			x.err = fmt.Errorf("floor did not echo its stdin")
		}
		floor.record(x, it)
	})
	b.pair(res, "host-local ADD", "reference", n0, b.refCall(n0, "host-local", "hl", b.hostLocalConf("host-local")), "10.128.")
	if b.opts.churnOnly {
		return
	}
	for _, backend := range []string{"iptables", "nftables"} {
		b.pair(res, "portmap "+backend+" ADD", "reference", np, b.refCall(np, "portmap", "pm-"+backend, b.portmapConf(np, backend)), "10.64.0.3/10")
	}
}

// refCall makes the ADD of a reference plugin at iteration it.
func (b *bench) refCall(n0 *node, bin, tag string, conf []byte) func(int) call {
	return func(it int) call {
		return call{bin: b.bins[bin], command: "ADD", containerID: fmt.Sprintf("%s-%d", tag, it), ifName: "eth0", netns: n0.podPath(), stdin: conf}
	}
}

// hostLocalConf is host-local on a /16, its state in dir on the tmpfs.
func (b *bench) hostLocalConf(dir string) []byte {
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "host-local",
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(b.state, dir),
			"ranges": [][]map[string]any{{{"subnet": "10.128.0.0/16"}}}}})
	return conf
}

const floorRow = "exec floor (stdin to stdout)"

// portmapConf is portmap v1.10.0 with one TCP port mapping to the
// container's IPv4 address (an IPv6 address in prevResult would make it
// map that family too).
func (b *bench) portmapConf(n0 *node, backend string) []byte {
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "portmap", "backend": backend,
		"runtimeConfig": map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
		"prevResult":    prevResult(n0, 3, false)})
	return conf
}

// eipRow names external-ip's rows.
func eipRow(verb, fam, traffic string) string {
	return fmt.Sprintf("external-ip %s %s, traffic %s", verb, fam, traffic)
}

// eipUnits are external-ip's rows on the empty node: each family with
// steering off and on and the cgo build; and on the node np, the build
// that neither gives to a sink nor parks (a child holds the sockets kept
// past the exit), whose rows against the default build's are what the
// sink and parking save over that child. On a node of its own: each of
// its children releases a netfilter socket as it ends, which holds the
// commit lock through any destroy work pending then, and would make the
// empty node's other rows wait.
func (b *bench) eipUnits(res *results, n0, np *node) {
	s := 1
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, traffic := range b.trafficModes() {
			b.eipPair(res, eipRow("ADD", fam, traffic), "external-ip", n0, "external-ip", s, fam == "IPv6", traffic)
			s++
		}
	}
	b.eipPair(res, "external-ip ADD IPv4, traffic "+b.defaultTraffic()+", cgo build", "what-if", n0, "external-ip-cgo", s, false, b.defaultTraffic())
	b.eipPair(res, "external-ip ADD IPv4, traffic "+b.defaultTraffic()+", holding child (nopark build)", "what-if", np, "external-ip-nopark", s+1, false, b.defaultTraffic())
}

func famName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// eipPair is pair for external-ip scenario s: a new IP each iteration.
func (b *bench) eipPair(res *results, add, group string, n *node, bin string, s int, v6 bool, traffic string) {
	k := 1_000_000 + s
	a4, _ := containerAddrs(k)
	b.pair(res, add, group, n, func(it int) call { return b.eipCall(b.bins[bin], "ADD", n, k, traffic, scenarioIP(s, it, v6)) }, a4)
}

// pair adds the ADD row named add, its DEL row and their unit (pairUnit).
func (b *bench) pair(res *results, add, group string, n *node, mk func(it int) call, want string) {
	res.units = append(res.units, b.pairUnit(res, add, group, n, mk, want).run)
}

// pairUnit adds the ADD row named add and its DEL row, and returns their
// unit: mk's ADD, which must print want, then the same call as DEL.
func (b *bench) pairUnit(res *results, add, group string, n *node, mk func(it int) call, want string) timed {
	a, d := res.add(add, "ADD", group), res.add(strings.Replace(add, "ADD", "DEL", 1), "DEL", group)
	return timed{rows: []*series{a, d}, run: func(it int) {
		c := mk(it)
		x := b.execIn(n, c)
		if x.err == nil && !bytes.Contains(x.stdout, []byte(want)) {
			x.err = fmt.Errorf("ADD printed no %s: %q", want, x.stdout)
		}
		a.record(x, it)
		c.command = "DEL"
		d.record(b.execIn(n, c), it)
	}}
}
