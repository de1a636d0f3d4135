package netns

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// A second external IP on uplink1's network, and a network of external
// IPs that the node reaches through uplink1's router rather than on the
// link (the router routes it back to the node).
const (
	eip4b                  = "198.51.100.11"
	routedEIP4, routedEIP6 = "198.18.0.10", "2001:db8:4::10"
	routedNet4, routedNet6 = "198.18.0.0/24", "2001:db8:4::/64"
)

// faultBuild makes libcni find the faultinject build as external-ip: it
// works as the plugin does until told at which step to kill itself.
func (w *world) faultBuild() {
	w.t.Helper()
	dir := w.t.TempDir()
	if err := os.Symlink(faultBinary(w.t), filepath.Join(dir, "external-ip")); err != nil {
		w.t.Fatal(err)
	}
	w.cni = libcni.NewCNIConfigWithCacheDir([]string{exampleTools(w.t), dir}, w.t.TempDir(), nil)
}

// killedAt runs f in the node with the plugin told to kill itself at
// step, and fails the test unless the call failed (the plugin prints no
// error when killed).
func (w *world) killedAt(step, what string, f func() error) {
	w.t.Helper()
	w.t.Setenv(assigner.CrashEnv, step)
	var err error
	w.inNode(what, func() error { err = f(); return nil })
	os.Unsetenv(assigner.CrashEnv)
	if err == nil {
		w.t.Fatalf("%s was not killed at step %q", what, step)
	}
}

// tryDel is del that returns the chain's error.
func (w *world) tryDel(c *container) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.cni.DelNetworkList(ctx, w.list, c.rt)
}

// noneOfOursLeft fails the test if a rule, route or chain of ours is
// left, or the node's rules and routes differ from before.
func (u *twoUplinks) noneOfOursLeft(when, before string) {
	u.t.Helper()
	if got := u.ourObjects(); len(got) != 0 {
		u.t.Errorf("%s these of ours are left: %q", when, got)
	}
	if after := u.policy(); after != before {
		u.t.Errorf("the node's rules and routes %s:\n%s\nbefore the first ADD:\n%s", when, after, before)
	}
}

// An ADD of the uplink's first IPs killed in its routing step (routed
// with no chain, chains and members in) is rolled
// back by the next invocation, which routes its own IP on the uplink.
func TestAnAddKilledInTheUplinkRoutingIsRolledBackAndTheNextAddIsRouted(t *testing.T) {
	for _, step := range []string{"uplink-routed", "uplink-members"} {
		t.Run(step, func(t *testing.T) {
			u := newTwoUplinks(t, uplinkOpts{})
			u.faultBuild()
			before := u.policy()
			a := u.container("a", eip4, eip6)
			u.killedAt(step, "ADD a", func() error { return u.tryAdd(a) })
			b := u.add("b", eip4b)
			serve(t, b.netns, "b", svPort)
			u.h.consistent("after the next ADD")
			if err := u.check(b); err != nil {
				t.Errorf("CHECK b after the next ADD: %v", err)
			}
			mustAsk(t, "the client to b's IP", nsPath(u.client), "tcp", eip4b, svPort, "b", cliV4)
			u.del(a) // the runtime's DEL of the failed ADD
			u.h.consistent("after DEL a")
			if err := u.check(b); err != nil {
				t.Errorf("CHECK b after DEL a: %v", err)
			}
			u.del(b)
			u.noneOfOursLeft("after the last DEL", before)
		})
	}
}

// A DEL killed in its routing step is finished by the retried DEL: while
// another IP is held on the uplink its routing stays whole, and after the
// uplink's last DEL nothing of ours is left.
func TestADelKilledInTheUplinkRoutingIsFinishedByTheRetriedDel(t *testing.T) {
	for _, step := range []string{"uplink-members", "uplink-unmarked"} {
		t.Run(step, func(t *testing.T) {
			u := newTwoUplinks(t, uplinkOpts{})
			u.faultBuild()
			before := u.policy()
			a := u.add("a", eip4, eip6)
			b := u.add("b", eip4b)
			serve(t, a.netns, "a", svPort)
			if step == "uplink-unmarked" {
				u.del(b) // only the uplink's last DEL takes its routes away
			} else {
				u.killedAt(step, "DEL b", func() error { return u.tryDel(b) })
				u.del(b)
				u.h.consistent("after the retried DEL of b")
			}
			if err := u.check(a); err != nil {
				t.Errorf("CHECK a, which holds the uplink's other IPs: %v", err)
			}
			addressFamilies(t, func(t *testing.T, eip, cli string) {
				mustAsk(t, "the client to a's IP", nsPath(u.client), "tcp", eip, svPort, "a", cli)
			})
			u.killedAt(step, "DEL a", func() error { return u.tryDel(a) })
			u.del(a)
			u.h.consistent("after the retried DEL of a")
			u.noneOfOursLeft("after the retried last DEL", before)
		})
	}
}

// The "failing that": an uplink with no default route of its own
// whose external IPs' network the main table reaches through its router.
func TestAnUplinkWithNoDefaultRouteRoutesByTheGatewayOfTheRouteToItsIPsNetwork(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{noDefault: true, conf: map[string]any{"allowedRanges": []string{routedNet4, routedNet6}}})
	u.h.inNode("ip route add %s via %s dev uplink1", routedNet4, gwV4)
	u.h.inNode("ip -6 route add %s via %s dev uplink1", routedNet6, gwV6)
	u.h.sh("ip -n %s route add %s via %s", u.router, routedNet4, up1V4)
	u.h.sh("ip -n %s -6 route add %s via %s", u.router, routedNet6, up1V6)
	before := u.policy()
	a := u.add("a", routedEIP4, routedEIP6)
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(u.client), "client", lanSv)
	for _, c := range []struct{ eip, cli, gw, ip string }{{routedEIP4, cliV4, gwV4, "ip"}, {routedEIP6, cliV6, gwV6, "ip -6"}} {
		mustAsk(t, "the client to the external IP", nsPath(u.client), "tcp", c.eip, svPort, "a", c.cli)
		mustAsk(t, "the container to the client", a.netns, "udp", c.cli, lanSv, "client", c.eip)
		if table := u.h.inNode("%s route show table %s", c.ip, ourFirstTable); !strings.Contains(table, "default via "+c.gw+" dev uplink1") {
			t.Errorf("table %s is %q, want the default route via %s, the gateway of the route to the IP's network", ourFirstTable, table, c.gw)
		}
	}
	u.del(a)
	u.noneOfOursLeft("after the last DEL", before)
}

// An uplink with no IPv4 address of its own and a default route through
// it: its table routes by that gateway, onlink (docs/uplinks.md).
func TestAnUplinkWithNoIPv4AddressRoutesByTheGatewayOfItsOwnDefaultRoute(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{withoutV4: true})
	before := u.policy()
	a := u.add("a", eip4)
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(u.client), "client", lanSv)
	mustAsk(t, "the client to the external IP", nsPath(u.client), "tcp", eip4, svPort, "a", cliV4)
	mustAsk(t, "the container to the client", a.netns, "tcp", cliV4, lanSv, "client", eip4)
	if table := u.h.inNode("ip route show table %s", ourFirstTable); !strings.Contains(table, "default via "+gwV4+" dev uplink1 proto 225 onlink") {
		t.Errorf("table %s is %q, want the default route via uplink1's own default gateway %s, onlink", ourFirstTable, table, gwV4)
	}
	u.del(a)
	u.noneOfOursLeft("after the last DEL", before)
}

// When the default route moves to the external IP's uplink, GC takes our
// routing for it away (the main table now sends its flows out of it);
// when it moves back, `external-ip repair` routes the uplink again.
func TestGCAndRepairMoveTheUplinkRoutingWhenTheDefaultRouteChangesUplink(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	before := u.policy()
	a := u.add("a", eip4, eip6)
	serve(t, a.netns, "a", svPort)
	if len(u.ourObjects()) == 0 {
		t.Fatal("no routing of ours for uplink1 while the default routes are uplink0's")
	}
	u.h.inNode("ip route del default via %s dev uplink0", lanV4)
	u.h.inNode("ip -6 route del default via %s dev uplink0", lanV6)
	u.gc(a)
	if got := u.ourObjects(); len(got) != 0 {
		t.Errorf("after GC with uplink1 the default route's uplink, these of ours are left: %q", got)
	}
	u.answered("with the default routes on uplink1", a)
	u.h.inNode("ip route add default via %s dev uplink0 metric 100", lanV4)
	u.h.inNode("ip -6 route add default via %s dev uplink0 metric 100", lanV6)
	if err := u.check(a); err == nil || !strings.Contains(err.Error(), "uplink1") {
		t.Errorf("CHECK with the default routes back on uplink0 and uplink1 unrouted: %v, want drift naming uplink1", err)
	}
	u.h.inNode("%s repair --data-dir %s", pluginBin, u.h.dataDir)
	for _, ip := range []string{"ip", "ip -6"} {
		if rules := u.h.inNode("%s rule", ip); !strings.Contains(rules, ourRulePrio+":") {
			t.Errorf("after repair `%s rule` has no rule of ours at %s:\n%s", ip, ourRulePrio, rules)
		}
	}
	u.answered("after repair", a)
	u.del(a)
	u.noneOfOursLeft("after the last DEL", before)
}

// answered fails the test unless CHECK passes and the client behind the
// router reaches c at each external IP.
func (u *twoUplinks) answered(when string, c *container) {
	u.t.Helper()
	if err := u.check(c); err != nil {
		u.t.Errorf("CHECK %s: %v", when, err)
	}
	addressFamilies(u.t, func(t *testing.T, eip, cli string) {
		mustAsk(t, "the client "+when, nsPath(u.client), "tcp", eip, svPort, "a", cli)
	})
}
