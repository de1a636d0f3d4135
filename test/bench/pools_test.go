package main

import (
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/bench/poolrows"
)

// The node-local pool's row is among the pool rows whether or not the
// Kubernetes build is cached (here it is not: no repository), and is
// printed with a p50 and a p95 that parse, held against the explicit-IP
// row with its goal, and paired with it.
func TestTheNodeLocalPoolRowIsPrintedAgainstTheExplicitIPRow(t *testing.T) {
	b := &bench{opts: options{churnRounds: 5, uplinkRounds: 5}, bins: map[string]string{}, trafficKey: true, root: t.TempDir()}
	res := &results{byName: map[string]*series{}}
	n := &node{name: "n"}
	b.eipPair(res, eipRow("ADD", "IPv4", b.defaultTraffic()), "external-ip", n, "external-ip", 1, false, b.defaultTraffic())
	if err := poolUnits(b, res, n); err != nil {
		t.Fatal(err)
	}
	if res.byName[poolrows.RowLocalPool] == nil || res.byName[poolrows.RowNamedLocal] == nil || len(res.units) != 3 {
		t.Fatalf("rows %v, units %d: want the node-local pool's rows and their units beside the explicit IP's", res.rows, len(res.units))
	}
	for i, s := range res.rows {
		for it := range 40 {
			s.samples = append(s.samples, sample{it: it, wall: time.Duration(1000+10*i+it*50) * time.Microsecond})
		}
	}
	printed := false
	for _, line := range strings.Split(res.latencyTable(), "\n") {
		c := cells(line)
		printed = printed || c[0] == poolrows.RowLocalPool && msCell.MatchString(c[1]) && msCell.MatchString(c[2])
	}
	var goal, paired bool
	for _, line := range strings.Split(res.comparisonTable(b), "\n") {
		c := cells(line)
		if len(c) == 9 && c[0] == poolrows.RowLocalPool && c[1] == eipRow("ADD", "IPv4", b.defaultTraffic()) {
			goal = goal || c[8] == "within the run's noise" && strings.HasSuffix(c[6], " ms")
			paired = paired || strings.HasPrefix(c[6], "paired ")
		}
	}
	if !printed || !goal || !paired {
		t.Errorf("node-local pool row: printed %v, against the explicit IP with its goal %v, paired %v", printed, goal, paired)
	}
}
