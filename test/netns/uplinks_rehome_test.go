package netns

import "testing"

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
