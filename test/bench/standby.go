package main

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/external-ip/external-ip/test/bench/standbyrows"
)

// The standby rows (package standbyrows): a standby's ADD and today's,
// timed in the iterations; the takeover times and the check traffic, which
// the rows measure from the LAN, on pairs of nodes of their own.
func standbyUnits(b *bench, res *results, _ *node) error {
	rows := standbyrows.New(standbyrows.Config{ID: b.id, Dir: filepath.Join(b.state, "standby"), Plugin: b.bins["external-ip"],
		Traffic: b.defaultTraffic(), Rounds: b.opts.standbyRounds})
	b.atClose = append(b.atClose, rows.Close)
	return rows.Start(standbySeam{poolSeam{b, res}})
}

// standbySeam is the bench as the standby rows see it: the pool rows'
// seam (the bench, its results, Logf) with the standby rows' methods.
type standbySeam struct{ poolSeam }

func (s standbySeam) Print(table string) { s.res.tables = append(s.res.tables, table) }

func (s standbySeam) Pair(row string, sn standbyrows.Node, k int, keys func(it int) map[string]any) error {
	h, err := ns.GetNS("/var/run/netns/" + sn.NetNS)
	if err != nil {
		return err
	}
	n := &node{name: sn.NetNS, pod: sn.Pod, ns: h, dataDir: sn.DataDir}
	s.b.nodes = append(s.b.nodes, n) // close closes the handle
	a4, _ := containerAddrs(k)
	s.b.pair(s.res, row, "standby", n, func(it int) call {
		c := s.b.eipCall(s.b.bins["external-ip"], "ADD", n, k, s.b.defaultTraffic())
		c.stdin = withKeys(c.stdin, keys(it))
		return c
	}, a4)
	return nil
}

func (s standbySeam) Record(row string, took []time.Duration, fails int) {
	r := s.res.add(row, "takeover", "standby")
	for i, d := range took {
		r.samples = append(r.samples, sample{it: i, wall: d})
	}
	r.fails = fails
}

// withKeys is a network config with each of keys' keys set.
func withKeys(conf []byte, keys ...map[string]any) []byte {
	var m map[string]any
	json.Unmarshal(conf, &m)
	for _, k := range keys {
		maps.Copy(m, k)
	}
	out, _ := json.Marshal(m)
	return out
}
