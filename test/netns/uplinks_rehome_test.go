package netns

import (
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// An uplink renamed under a held IP (taken down, renamed, up again with
// its default route): the next ADD of the IP re-homes it to the new name,
// and moves everything of the IP's other holders with it, their uplink
// marks as well as their SNAT: their flows leave by the uplink from the IP
// again, and CHECK and status pass, without waiting for GC. Before, their
// marks stayed in the old name's chain, whose table had lost its route:
// their flows left by the default route, masqueraded.
func TestAnAddThatReHomesAnIPMovesTheOtherHoldersUplinkMarksWithTheirSNAT(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	a := u.add("a", eip4)
	serve(t, nsPath(u.client), "client", lanSv)
	serve(t, nsPath(u.h.lan), "lan", lanSv)
	mustAsk(t, "a to the client before the rename", a.netns, "tcp", cliV4, lanSv, "client", eip4)
	u.h.inNode("ip link set uplink1 down")
	u.h.inNode("ip link set uplink1 name uplink9")
	u.h.inNode("ip link set uplink9 up")
	u.h.inNode("ip route add default via %s dev uplink9 metric 200", gwV4)
	b := u.add("b", eip4)
	for _, c := range []*container{a, b} {
		if err := u.check(c); err != nil {
			t.Errorf("CHECK of %s after b's ADD re-homed the IP: %v", c.id, err)
		}
		mustAsk(t, c.id+" to the client after the re-homing ADD", c.netns, "tcp", cliV4, lanSv, "client", eip4)
	}
	if drift := u.h.drift(); len(drift) != 0 {
		t.Errorf("status after the re-homing ADD names drift %q", drift)
	}
}

// A re-ADD that re-homes an IP whose uplink was renamed, killed and then
// rolled back, and the DEL after it, must leave no proxy entry of ours on
// the new uplink: the node would answer the LAN for an IP nobody holds.
func TestARolledBackReHomingReAddLeavesNoProxyEntryOnTheNewUplink(t *testing.T) {
	const ip = "192.0.2.40"
	for _, step := range []string{"control", "index", "done"} {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			h.forwardIPv4()
			conf := h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs(ip)})
			h.run(attach("ADD", "a", conf)).mustOK(t, "ADD a")
			h.inNode("ip link set uplink0 down")
			h.inNode("ip link set uplink0 name uplink9")
			h.inNode("ip link set uplink9 up")
			if step == "control" {
				h.run(attach("ADD", "a", conf)).mustOK(t, "the re-homing re-ADD, not killed")
			} else if r := h.runWith(faultBinary(t), attach("ADD", "a", conf), assigner.CrashEnv+"="+step); r.err == nil {
				t.Fatalf("the re-ADD to be killed at %s succeeded", step)
			}
			gc := func(valid []string) {
				h.run(call{command: "GC", conf: h.gcConf(conf["name"].(string), valid, map[string]any{"hold": "route"})}).mustOK(t, "GC")
			}
			gc([]string{"a"}) // a still runs: GC re-homes what the roll-back left
			h.run(attach("DEL", "a", conf)).mustOK(t, "DEL a after the killed re-ADD")
			gc(nil)
			if out := h.stdout("ip -n %s neigh show proxy", h.name); strings.Contains(out, ip) {
				t.Errorf("after DEL and GC a proxy entry for %s, which nobody holds, is still there:\n%s", ip, out)
			}
		})
	}
}
