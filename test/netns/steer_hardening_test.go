package netns

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An ADD that steers relies on the base chains of table inet external-ip
// and their rules: after someone flushes the table or one base chain, the
// next ADD must put them back, or its IP is answered by the node itself
// until GC or repair runs.
func TestAddAfterTheTableOrABaseChainWasFlushedRestoresItAndSteers(t *testing.T) {
	w := newWorld(t, "both")
	w.add("a", extV4)
	serve(t, nsPath(w.h.lan), "lan", lanSv)
	// One world, one fault after another: each ADD must mend what the
	// fault before it broke, whatever the ADDs before it did.
	for i, c := range []struct{ what, cmd string }{
		{"table flushed", "flush table inet external-ip"},
		{"prerouting flushed", "flush chain inet external-ip prerouting"},
		{"postrouting flushed", "flush chain inet external-ip postrouting"},
	} {
		w.h.nft("%s", c.cmd)
		ext := fmt.Sprintf("192.0.2.%d", 11+i)
		name := fmt.Sprintf("b%d", i)
		b := w.add(name, ext)
		serve(t, b.netns, name, svPort)
		mustAsk(t, "LAN to "+name+"'s external IP, ADDed after the "+c.what, nsPath(w.h.lan), "tcp", ext, svPort, name, lanV4)
		mustAsk(t, name+" to the LAN, ADDed after the "+c.what, b.netns, "tcp", lanV4, lanSv, "lan", ext)
		if err := w.check(b); err != nil {
			t.Errorf("CHECK of %s, ADDed after the %s: %v", name, c.what, err)
		}
	}
}

// hairpinSets is what `nft list set` prints of hp4 and hp6.
func (h *host) hairpinSets() string {
	h.t.Helper()
	return h.nft("list set inet external-ip hp4") + h.nft("list set inet external-ip hp6")
}

// Container subnets that nest (a network widened from /24 to /16, a main
// plugin giving a /32 or /25 inside a subnet already steered) used to fail
// ADD with code 100 (file exists) until the old pods were gone. They must
// all steer, and GC keeps exactly the subnets some record still needs.
func TestNestedContainerSubnetsAllSteerAndGCKeepsWhatRecordsNeed(t *testing.T) {
	h := newHost(t)
	confs := map[string]map[string]any{
		"a": h.steeredConfIn("1.1.0", "10.1.0.5/24", "fd00:1::5/64", "192.0.2.10", "2001:db8:1::10"),
		"b": h.steeredConfIn("1.1.0", "10.1.0.6/16", "fd00:1::6/48", "192.0.2.11", "2001:db8:1::11"), // the network widened
		"c": h.steeredConfIn("1.1.0", "10.1.0.7/32", "fd00:1::7/128", "192.0.2.12", "2001:db8:1::12"),
		"d": h.steeredConfIn("1.1.0", "10.1.1.8/25", "fd00:1:1::8/96", "192.0.2.13", "2001:db8:1::13"),
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		h.run(attach("ADD", id, confs[id])).mustOK(t, "ADD "+id+" with nested container subnets")
	}
	checkAll := func(when string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			h.run(attach("CHECK", id, confs[id])).mustOK(t, "CHECK "+id+" "+when)
		}
		h.targets(when) // fails on drift
	}
	checkAll("after every ADD", "a", "b", "c", "d")
	gc := func(valid ...string) {
		t.Helper()
		h.run(call{command: "GC", conf: h.gcConf("testnet", valid, map[string]any{"traffic": "both"})}).mustOK(t, fmt.Sprintf("GC keeping %v", valid))
	}
	gc("a", "b", "c", "d")
	checkAll("after GC kept them all", "a", "b", "c", "d")

	// b (the /16) leaves: a's /24 still serves a and c, d's /25 needs its own.
	h.run(attach("DEL", "b", h.netConf("1.1.0", nil))).mustOK(t, "DEL b")
	gc("a", "c", "d")
	checkAll("after b left and GC", "a", "c", "d")
	sets := h.hairpinSets()
	for _, want := range []string{"10.1.0.0/24 . 10.1.0.0/24", "10.1.1.0/25 . 10.1.1.0/25", "fd00:1::/64 . fd00:1::/64", "fd00:1:1::/96 . fd00:1:1::/96"} {
		if !strings.Contains(sets, want) {
			t.Errorf("after b left and GC the hairpin sets lack %q:\n%s", want, sets)
		}
	}
	if strings.Contains(sets, "/16") || strings.Contains(sets, "/48") {
		t.Errorf("after b left and GC its subnets, which no record needs, are still there:\n%s", sets)
	}

	// a leaves: c's /32 needs its own element now.
	h.run(attach("DEL", "a", h.netConf("1.1.0", nil))).mustOK(t, "DEL a")
	gc("c", "d")
	checkAll("after a left and GC", "c", "d")
	if sets := h.hairpinSets(); !strings.Contains(sets, "10.1.0.7 . 10.1.0.7") || !strings.Contains(sets, "fd00:1::7 . fd00:1::7") || strings.Contains(sets, "10.1.0.0/24") || strings.Contains(sets, "fd00:1::/64") {
		t.Errorf("after a left and GC the hairpin sets should hold c's 10.1.0.7 and fd00:1::7 alone, not a's /24 and /64:\n%s", sets)
	}
	for _, id := range []string{"c", "d"} {
		h.run(attach("DEL", id, h.netConf("1.1.0", nil))).mustOK(t, "DEL "+id)
	}
	gc()
	if sets := h.hairpinSets(); strings.Contains(sets, "10.1.") || strings.Contains(sets, "fd00:1:") {
		t.Errorf("after every DEL and GC the hairpin sets still hold subnets:\n%s", sets)
	}
}

// drift is every drift line of `external-ip status --json`.
func (h *host) drift() []string {
	h.t.Helper()
	return h.driftIn(h.dataDir)
}

// driftIn is drift of the state in dataDir.
func (h *host) driftIn(dataDir string) []string {
	h.t.Helper()
	out := h.inNode("%s status --json --data-dir %s", pluginBin, dataDir)
	var reps []steeredStatus
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		h.t.Fatalf("status --json printed %q: %v", out, err)
	}
	var all []string
	for _, r := range reps {
		all = append(all, r.Drift...)
	}
	return all
}

// mustDrift fails unless some drift line names every one of parts.
func mustDrift(t *testing.T, when string, drift []string, parts ...string) {
	t.Helper()
	for _, d := range drift {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(d, p) }) {
			return
		}
	}
	t.Errorf("%s: no drift line names %q; status said %q", when, parts, drift)
}

// Status must show what GC and repair would remove: every address on our
// holder that no record holds, its proxy neighbour entry and the NAT rules
// of it, also when the state directory is lost (then GC removes them all,
// and status used to say "no external IPs held, drift: none").
func TestStatusShowsEveryStrayAlsoWithTheStateDirectoryLost(t *testing.T) {
	h := newHost(t)
	h.run(attach("ADD", "a", h.steeredConf("1.1.0", "10.1.0.5", "fd00:1::5", "192.0.2.10", "2001:db8:1::10"))).mustOK(t, "ADD a")
	if d := h.drift(); len(d) != 0 {
		t.Fatalf("drift right after ADD: %q", d)
	}
	// Strays beside a's: an address pair and a proxy entry. (A hairpin
	// subnet no record needs is no drift while the state is there: a DEL
	// leaves its subnet for GC by design.)
	h.inNode("ip addr add 192.0.2.99/32 dev eip0")
	h.inNode("ip addr add 2001:db8:1::99/128 dev eip0 nodad")
	h.inNode("ip -6 neigh add proxy 2001:db8:1::99 dev uplink0")
	d := h.drift()
	mustDrift(t, "strays beside a record", d, "192.0.2.99", "held by no record")
	mustDrift(t, "strays beside a record", d, "2001:db8:1::99", "proxy", "uplink0")

	h.sh("rm -rf %s", filepath.Join(h.dataDir, "eip0"))
	d = h.drift()
	for _, ip := range []string{"192.0.2.10", "2001:db8:1::10", "192.0.2.99", "2001:db8:1::99"} {
		mustDrift(t, "state directory lost", d, ip, "eip0", "held by no record")
	}
	mustDrift(t, "state directory lost", d, "2001:db8:1::10", "proxy", "uplink0")
	mustDrift(t, "state directory lost", d, "192.0.2.10", "ingress")
	mustDrift(t, "state directory lost", d, "10.1.0.5", "egress")
	mustDrift(t, "state directory lost", d, "10.1.0.0/24", "hairpin")

	// What status showed is what repair removes: then there is none.
	h.inNode("%s repair --data-dir %s", pluginBin, h.dataDir)
	if d := h.drift(); len(d) != 0 {
		t.Errorf("drift after repair: %q", d)
	}
}

// The host firewall's reload (Debian's nftables.service runs
// /etc/nftables.conf, whose usual first line is `flush ruleset`) deletes
// our whole table. The next ADD that makes it anew must steer again every
// attachment of its state directory, not only its own: the others would
// otherwise be answered by the node itself until GC, repair or upkeep.
func TestAnAddAfterAFlushedRulesetSteersTheAttachmentsAddedBeforeIt(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4)
	serve(t, a.netns, "a", svPort)
	mustAsk(t, "LAN to a before the flush", nsPath(w.h.lan), "tcp", extV4, svPort, "a", lanV4)
	w.h.nft("flush ruleset")
	b := w.add("b", "192.0.2.11")
	serve(t, b.netns, "b", svPort)
	mustAsk(t, "LAN to b, ADDed after the flush", nsPath(w.h.lan), "tcp", "192.0.2.11", svPort, "b", lanV4)
	if err := w.check(a); err != nil {
		t.Errorf("CHECK of a, ADDed before the flush, after b's ADD: %v", err)
	}
	mustAsk(t, "LAN to a, ADDed before the flush, after b's ADD", nsPath(w.h.lan), "tcp", extV4, svPort, "a", lanV4)
}
