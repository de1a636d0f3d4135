package netns

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// The pod networks of the exclusion tests: the node's two networks, and
// the pods of another node (the LAN namespace plays it) that each
// network's egressExcludedCIDRs names.
var (
	netOne = podNet{"10.88.0.0/24", "fd00:88::/64", false}
	netTwo = podNet{"10.87.0.0/24", "fd00:87::/64", false}
)

const (
	otherPodOne = "10.99.0.7" // in netOne's excluded 10.99.0.0/16
	otherPodTwo = "10.98.0.7" // in netTwo's excluded 10.98.0.0/16
)

// exclusionWorld is a node on a routed pod network (no masquerade by the
// bridge): network "steer" on netOne excludes 10.99.0.0/16, and the LAN
// namespace has a pod address of each list, with routes back to both
// networks through the node, as another node of a routed pod network
// has.
func exclusionWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, "both")
	// A cache of its own: libcni's GC DELs every attachment its cache
	// has of the network, also other tests' and runs'.
	w.cni = libcni.NewCNIConfigWithCacheDir([]string{exampleTools(t), pluginDir()}, t.TempDir(), nil)
	w.list = bridgeListOn(t, "1.1.0", "steer", "cni-steer", netOne, w.eipEntry([]string{"10.99.0.0/16"}))
	for _, addr := range []string{otherPodOne, otherPodTwo} {
		w.h.sh("ip -n %s addr add %s/32 dev lan0", w.h.lan, addr)
	}
	for _, n := range []podNet{netOne, netTwo} {
		w.h.sh("ip -n %s route add %s via %s", w.h.lan, n.v4, nodeV4)
	}
	w.h.inNode("ip route add 10.99.0.0/24 via %s dev uplink0", lanV4)
	w.h.inNode("ip route add 10.98.0.0/24 via %s dev uplink0", lanV4)
	serve(t, nsPath(w.h.lan), "lan", lanSv)
	return w
}

// eipEntry is newWorld's external-ip entry with excluded as its
// egressExcludedCIDRs.
func (w *world) eipEntry(excluded []string) map[string]any {
	return map[string]any{
		"type": "external-ip", "dataDir": w.h.dataDir, "traffic": w.traffic,
		"allowedRanges": []string{subnet4, subnet6}, "conflictProbe": "0s",
		"announce":            map[string]any{"count": 1},
		"capabilities":        map[string]any{"externalIPs": true},
		"egressExcludedCIDRs": excluded,
	}
}

// secondNetwork is network "steer2" on netTwo, in w's node and state
// directory, excluding 10.98.0.0/16.
func (w *world) secondNetwork() *world {
	w2 := *w
	w2.list = bridgeListOn(w.t, "1.1.0", "steer2", "cni-steer2", netTwo, w.eipEntry([]string{"10.98.0.0/16"}))
	return &w2
}

// On a routed pod network a pod's flow to another node's pod leaves by
// the uplink: with the pod network in egressExcludedCIDRs it keeps the
// pod's own address (NetworkPolicy by pod address matches), while a flow
// to anything else through the uplink still leaves from the external IP.
func TestAnExcludedCIDRKeepsThePodsOwnAddressAndOtherFlowsLeaveFromTheExternalIP(t *testing.T) {
	w := exclusionWorld(t)
	a := w.add("a", extV4)
	mustAsk(t, "pod a to the other node's pod", a.netns, "tcp", otherPodOne, lanSv, "lan", a.v4.String())
	mustAsk(t, "pod a to a LAN host", a.netns, "tcp", lanV4, lanSv, "lan", extV4)
	mustAsk(t, "pod a to an address of the other node outside the list", a.netns, "tcp", otherPodTwo, lanSv, "lan", extV4)
}

// One table serves every network of the node: each network's exclusion
// applies to its own containers alone, survives the other network's GC,
// and comes back with every attachment's rules after a flushed ruleset.
func TestTwoNetworksExclusionsApplyEachToItsOwnContainersThroughGCAndAFlush(t *testing.T) {
	w := exclusionWorld(t)
	w2 := w.secondNetwork()
	a := w.add("a", extV4)
	b := w2.add("b", "192.0.2.11")
	flows := func(when string, withA bool) {
		t.Helper()
		if withA {
			mustAsk(t, when+": a to its network's excluded pod", a.netns, "tcp", otherPodOne, lanSv, "lan", a.v4.String())
			mustAsk(t, when+": a to the other network's excluded pod", a.netns, "tcp", otherPodTwo, lanSv, "lan", extV4)
		}
		mustAsk(t, when+": b to its network's excluded pod", b.netns, "tcp", otherPodTwo, lanSv, "lan", b.v4.String())
		mustAsk(t, when+": b to the other network's excluded pod", b.netns, "tcp", otherPodOne, lanSv, "lan", "192.0.2.11")
	}
	flows("both ADDed", true)

	w.h.nft("flush ruleset")
	w.add("c", "192.0.2.12") // makes the table anew, and every attachment's rules with it
	if err := w2.check(b); err != nil {
		t.Errorf("CHECK of b after the flush and c's ADD: %v", err)
	}
	flows("after a flushed ruleset and an ADD", true)

	w.gc() // network steer: a and c are gone
	sets := w.h.nft("list set inet external-ip nosnat4")
	if strings.Contains(sets, "10.88.0.0/24 . 10.99.0.0/16") || !strings.Contains(sets, "10.87.0.0/24 . 10.98.0.0/16") {
		t.Errorf("after GC of network steer the exclusion set should hold steer2's element alone:\n%s", sets)
	}
	flows("after GC of the other network", false)
	if err := w2.check(b); err != nil {
		t.Errorf("CHECK of b after GC of the other network: %v", err)
	}
}

// CHECK fails, as for any other steering rule gone, when an attachment's
// exclusion element is missing (its flows would be SNATed); status names
// it, and repair makes it again.
func TestCheckFailsWhenAnExclusionElementIsGoneAndRepairMakesItAgain(t *testing.T) {
	w := exclusionWorld(t)
	a := w.add("a", extV4)
	if err := w.check(a); err != nil {
		t.Fatalf("CHECK right after ADD: %v", err)
	}
	w.h.nft("delete element inet external-ip nosnat4 { 10.88.0.0/24 . 10.99.0.0/16 }")
	err := w.check(a)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 104 || !strings.Contains(te.Msg, "10.99.0.0/16") {
		t.Fatalf("CHECK with the exclusion element gone: %v, want code 104 naming 10.99.0.0/16", err)
	}
	mustDrift(t, "exclusion element gone", w.h.drift(), "10.88.0.0/24", "10.99.0.0/16", "egress exclusion")
	w.h.inNode("%s repair --data-dir %s", pluginBin, w.h.dataDir)
	if err := w.check(a); err != nil {
		t.Errorf("CHECK after repair: %v", err)
	}
	mustAsk(t, "pod a to the other node's pod after repair", a.netns, "tcp", otherPodOne, lanSv, "lan", a.v4.String())
}

// excludedConf is steeredConf with egressExcludedCIDRs.
func (h *host) excludedConf(v4, v6 string, ips ...string) map[string]any {
	h.t.Helper()
	conf := h.steeredConf("1.1.0", v4, v6, ips...)
	conf["egressExcludedCIDRs"] = []string{"10.96.0.0/12", "fd00:96::/108"}
	return conf
}

// An ADD killed at any step, the nat step's middle included, leaves
// nothing of the exclusion sets that the records do not account for: the
// next ADD on the subnet has its elements, status sees no drift, and GC
// removes them once no record has the subnet.
func TestAnAddWithExclusionsKilledAtAnyStepLeavesTheSetsAsTheRecordsSay(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range steerAddSteps {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			r := h.runWith(bin, attach("ADD", "a", h.excludedConf("10.1.0.5", "fd00:1::5", "192.0.2.10", "2001:db8:1::10")), "EXTERNAL_IP_CRASH_AT="+step)
			if r.err == nil {
				t.Fatalf("ADD a was not killed at step %q", step)
			}
			h.run(attach("ADD", "c", h.excludedConf("10.1.0.7", "fd00:1::7", "192.0.2.20"))).mustOK(t, "ADD c")
			if d := h.drift(); len(d) != 0 {
				t.Fatalf("drift after the killed ADD and the next: %q", d)
			}
			sets := h.nft("list set inet external-ip nosnat4") + h.nft("list set inet external-ip nosnat6")
			for _, el := range []string{"10.1.0.0/24 . 10.96.0.0/12", "fd00:1::/64 . fd00:96::/108"} {
				if !strings.Contains(sets, el) {
					t.Errorf("the exclusion sets lack c's element %s:\n%s", el, sets)
				}
			}
			h.run(attach("DEL", "c", h.netConf("1.1.0", nil))).mustOK(t, "DEL c")
			h.run(attach("DEL", "a", h.netConf("1.1.0", nil))).mustOK(t, "DEL a")
			h.run(call{command: "GC", conf: h.gcConf("testnet", nil, map[string]any{"traffic": "both"})}).mustOK(t, "GC")
			if sets := h.nft("list set inet external-ip nosnat4"); strings.Contains(sets, "10.1.0.0/24") {
				t.Errorf("after every DEL and GC the exclusion set still holds the subnet:\n%s", sets)
			}
		})
	}
}
