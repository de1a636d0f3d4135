package netns

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// The node of these tests has two uplinks: uplink0 to the LAN namespace,
// which carries the default route of each family, and uplink1 to a router
// namespace whose second leg leads to a client namespace. The external
// IPs live on uplink1's network. The LAN namespace also answers at the
// client's addresses, so that whichever host answers a container's flow
// to the client tells which uplink the flow left by.
const (
	eip4, eip6     = "198.51.100.10", "2001:db8:2::10"
	up1V4, up1V6   = "198.51.100.1", "2001:db8:2::1"
	gwV4, gwV6     = "198.51.100.254", "2001:db8:2::fe"
	cliV4, cliV6   = "203.0.113.2", "2001:db8:3::2"
	eipNet4        = "198.51.100.0/24"
	eipNet6        = "2001:db8:2::/64"
	ourRulePrio    = "4241"
	ourFirstTable  = "4241"
	ourSuppressPri = "4240"
)

// twoUplinks is a world whose node has a second uplink behind a router.
type twoUplinks struct {
	*world
	router, client string
}

// uplinkOpts shape the second uplink: withoutV4 gives it no IPv4 address
// of its own, only a route to the external IPs' network; noDefault leaves
// out its default routes (a gateway key must then name them).
type uplinkOpts struct {
	withoutV4, noDefault bool
	conf                 map[string]any // merged into the plugin's entry
}

func newTwoUplinks(t *testing.T, o uplinkOpts) *twoUplinks {
	t.Helper()
	h := newHost(t)
	id := randomID(3)
	u := &twoUplinks{router: "eipr-" + id, client: "eipc-" + id}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", u.router).Run()
		exec.Command("ip", "netns", "del", u.client).Run()
	})
	for _, ns := range []string{u.router, u.client} {
		h.sh("ip netns add %s", ns)
		h.sh("ip -n %s link set lo up", ns)
		h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", ns)
	}
	h.sh("ip -n %s link add uplink1 type veth peer name wan0 netns %s", h.name, u.router)
	h.sh("ip -n %s link add lan1 type veth peer name eth0 netns %s", u.router, u.client)
	u.router_(h)
	u.client_(h)
	u.node(h, o)
	u.world = uplinksWorld(t, h, o.conf)
	return u
}

func (u *twoUplinks) router_(h *host) {
	r := u.router
	h.sh("ip netns exec %s sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1", r)
	h.sh("ip -n %s addr add %s/24 dev wan0", r, gwV4)
	h.sh("ip -n %s addr add %s/64 dev wan0 nodad", r, gwV6)
	h.sh("ip -n %s addr add 203.0.113.254/24 dev lan1", r)
	h.sh("ip -n %s addr add 2001:db8:3::fe/64 dev lan1 nodad", r)
	h.sh("ip -n %s link set wan0 up", r)
	h.sh("ip -n %s link set lan1 up", r)
}

func (u *twoUplinks) client_(h *host) {
	c := u.client
	h.sh("ip -n %s addr add %s/24 dev eth0", c, cliV4)
	h.sh("ip -n %s addr add %s/64 dev eth0 nodad", c, cliV6)
	h.sh("ip -n %s link set eth0 up", c)
	h.sh("ip -n %s route add default via 203.0.113.254", c)
	h.sh("ip -n %s -6 route add default via 2001:db8:3::fe", c)
	// The LAN answers at the client's addresses too, so that a flow that
	// took the default route reaches a server that says so.
	h.sh("ip -n %s addr add %s/32 dev lo", h.lan, cliV4)
	h.sh("ip -n %s addr add %s/128 dev lo", h.lan, cliV6)
}

// node gives the node its second uplink, both default routes (uplink0's
// first) and rp_filter 1 on every interface.
func (u *twoUplinks) node(h *host, o uplinkOpts) {
	n := h.name
	h.sh("ip netns exec %s sysctl -qw net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.default.rp_filter=1 net.ipv4.conf.uplink0.rp_filter=1 net.ipv4.conf.uplink1.rp_filter=1", n)
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.uplink1.accept_dad=0 net.ipv6.conf.uplink1.forwarding=1", n)
	if o.withoutV4 {
		h.sh("ip -n %s link set uplink1 up", n)
		h.sh("ip -n %s route add %s dev uplink1", n, eipNet4)
	} else {
		h.sh("ip -n %s addr add %s/24 dev uplink1", n, up1V4)
		h.sh("ip -n %s link set uplink1 up", n)
	}
	h.sh("ip -n %s addr add %s/64 dev uplink1 nodad", n, up1V6)
	h.sh("ip -n %s route add default via %s dev uplink0 metric 100", n, lanV4)
	h.sh("ip -n %s -6 route add default via %s dev uplink0 metric 100", n, lanV6)
	if !o.noDefault {
		h.sh("ip -n %s route add default via %s dev uplink1 metric 200", n, gwV4)
		h.sh("ip -n %s -6 route add default via %s dev uplink1 metric 200", n, gwV6)
	}
	h.sh("ip netns exec %s ping -c1 -w3 %s", u.router, up1V6) // the veth pair is up
}

// uplinksWorld is newWorld's bridge and host-local with external IPs
// allowed on uplink1's network.
func uplinksWorld(t *testing.T, h *host, extra map[string]any) *world {
	t.Helper()
	w := &world{t: t, h: h, traffic: "both", cni: libcni.NewCNIConfigWithCacheDir([]string{exampleTools(t), pluginDir()}, t.TempDir(), nil)}
	eip := map[string]any{
		"type": "external-ip", "dataDir": h.dataDir,
		"allowedRanges": []string{eipNet4, eipNet6}, "conflictProbe": "0s",
		"announce":     map[string]any{"count": 1},
		"capabilities": map[string]any{"externalIPs": true},
	}
	for k, v := range extra {
		eip[k] = v
	}
	w.list = bridgeList(t, "1.1.0", "uplinks", "cni-up", eip)
	return w
}

// policy is the node's rules of both families and every route outside
// the main and local tables: what DEL must leave as it found it.
func (u *twoUplinks) policy() string {
	u.t.Helper()
	return u.h.inNode("sh -c 'ip rule; ip -6 rule; ip route show table all | grep -v -e \"table local\" -e \"^[^ ]* dev\" -e \"^default\" -e \"^[^ ]* via\"; ip -6 route show table all | grep -v -e \"table local\" -e \"^[^ ]* dev\" -e \"^default\" -e \"^[^ ]* via\"; true'")
}

// ourObjects names what of ours is in the node: rules at our priorities,
// routes of our protocol, our chain.
func (u *twoUplinks) ourObjects() []string {
	u.t.Helper()
	var out []string
	for _, cmd := range []string{"ip rule", "ip -6 rule", "ip route show table all", "ip -6 route show table all"} {
		for _, l := range strings.Split(u.h.inNode("%s", cmd), "\n") {
			if strings.HasPrefix(l, ourSuppressPri+":") || strings.HasPrefix(l, ourRulePrio+":") || strings.Contains(l, "proto 225") {
				out = append(out, l)
			}
		}
	}
	// The table and its base chain uplinks stay with the node's other
	// steering; an uplink's chain, or an element that goes to one, is ours.
	if text, err := u.h.try("ip netns exec %s nft list table inet external-ip", u.h.name); err == nil {
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "chain uplink4-") || strings.Contains(l, "chain uplink6-") || strings.Contains(l, "goto uplink") {
				out = append(out, strings.TrimSpace(l))
			}
		}
	}
	return out
}

// addressFamilies runs f for IPv4 and IPv6 with that family's external
// IP and client address.
func addressFamilies(t *testing.T, f func(t *testing.T, eip, cli string)) {
	t.Run("IPv4", func(t *testing.T) { f(t, eip4, cliV4) })
	t.Run("IPv6", func(t *testing.T) { f(t, eip6, cliV6) })
}

func TestAClientBehindTheSecondUplinksRouterReachesTheContainerAndItsEgressLeavesFromItsIP(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	before := u.policy()
	a := u.add("a", eip4, eip6)
	b := u.add("b")
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(u.client), "client", lanSv)
	serve(t, nsPath(u.h.lan), "lan", lanSv)
	addressFamilies(t, func(t *testing.T, eip, cli string) {
		for _, proto := range []string{"tcp", "udp"} {
			mustAsk(t, "the client behind the router to the external IP", nsPath(u.client), proto, eip, svPort, "a", cli)
			mustAsk(t, "the container to the client", a.netns, proto, cli, lanSv, "client", eip)
		}
		// b holds no external IP: its flows take the default route, to the
		// LAN (over TCP: the LAN's UDP server answers from its own address,
		// not from the client's that it also has).
		mustAsk(t, "a container without an external IP to the client", b.netns, "tcp", cli, lanSv, "lan", "")
	})
	if err := u.check(a); err != nil {
		t.Errorf("CHECK after ADD: %v", err)
	}
	if len(u.ourObjects()) == 0 {
		t.Fatalf("no rule, route or chain of ours after an ADD on the second uplink")
	}
	// nft reads back what we built over netlink as the text docs/uplinks.md shows.
	nft := u.h.inNode("nft list table inet external-ip")
	for _, want := range []string{
		`meta nfproto ipv4 ct mark & 0x0f000000 vmap @uplink-marks4`,
		`ct state new ip daddr . iifname vmap @uplink-in4`,
		`ct state new ip6 saddr . ip6 daddr != @nosnat6 ip6 saddr vmap @uplink-eg6`,
		"chain uplink4-1-uplink1 {\n\t\tct mark set ct mark & 0xf1ffffff | 0x01000000 meta mark set meta mark & 0xf1ffffff | 0x01000000\n",
		`elements = { 0x01000000 : goto uplink6-1-uplink1 }`,
		`elements = { ` + eip4 + ` . "uplink1" : goto uplink4-1-uplink1 }`,
		`elements = { ` + a.v6.String() + ` : goto uplink6-1-uplink1 }`,
	} {
		if !strings.Contains(nft, want) {
			t.Errorf("nft list table inet external-ip lacks %q:\n%s", want, nft)
		}
	}
	// ip reads back our rules as docs/uplinks.md shows them.
	rules := u.h.inNode("ip rule") + u.h.inNode("ip -6 rule")
	for _, want := range []string{
		ourSuppressPri + ":\tnot from all fwmark 0/0xf000000 lookup main suppress_prefixlength 0 proto 225",
		ourRulePrio + ":\tfrom all fwmark 0x1000000/0xf000000 lookup " + ourFirstTable + " proto 225",
	} {
		if strings.Count(rules, want) != 2 {
			t.Errorf("`ip rule` and `ip -6 rule` do not both show %q:\n%s", want, rules)
		}
	}
	u.del(a)
	u.del(b)
	if got := u.ourObjects(); len(got) != 0 {
		t.Errorf("after the last DEL these of ours are left: %q", got)
	}
	if after := u.policy(); after != before {
		t.Errorf("the node's rules and routes after the last DEL:\n%s\nbefore the first ADD:\n%s", after, before)
	}
}

func TestWithUplinkRoutingOffTheClientBehindTheRouterGetsNoAnswer(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{conf: map[string]any{"uplinkRouting": map[string]any{"mode": "off"}}})
	a := u.add("a", eip4)
	serve(t, a.netns, "a", svPort)
	// The reply leaves by the default route, to the LAN, which drops it:
	// what the routing of ours is for.
	if name, _, err := ask(t, nsPath(u.client), "tcp", eip4, svPort); err == nil {
		t.Fatalf("the client was answered by %s with uplink routing off; the test would not tell it on from off", name)
	}
	if got := u.ourObjects(); len(got) != 0 {
		t.Errorf("uplink routing off made %q", got)
	}
}

func TestAnUplinkWithNoIPv4AddressRoutesByTheGatewayItsKeyNames(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{withoutV4: true, noDefault: true, conf: map[string]any{
		"uplinkRouting": map[string]any{"gateways": map[string]any{"uplink1": []string{gwV4, gwV6}}},
	}})
	a := u.add("a", eip4, eip6)
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(u.client), "client", lanSv)
	addressFamilies(t, func(t *testing.T, eip, cli string) {
		mustAsk(t, "the client behind the router to the external IP", nsPath(u.client), "tcp", eip, svPort, "a", cli)
		mustAsk(t, "the container to the client", a.netns, "udp", cli, lanSv, "client", eip)
	})
	table := u.h.inNode("ip route show table %s", ourFirstTable)
	if !strings.Contains(table, "default via "+gwV4+" dev uplink1") {
		t.Errorf("table %s is %q, want the default route via the key's gateway %s", ourFirstTable, table, gwV4)
	}
	u.del(a)
	if got := u.ourObjects(); len(got) != 0 {
		t.Errorf("after the last DEL these of ours are left: %q", got)
	}
}

func TestCheckFailsWhenARuleOfOursIsGoneAndGCPutsItBack(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	a := u.add("a", eip4)
	serve(t, a.netns, "a", svPort)
	u.h.inNode("ip rule del pref %s", ourRulePrio)
	err := u.check(a)
	if err == nil || !strings.Contains(err.Error(), "no rule pref "+ourRulePrio) {
		t.Fatalf("CHECK with our rule removed: got %v, want an error naming rule pref %s", err, ourRulePrio)
	}
	if out, _ := u.h.try("ip netns exec %s %s status --data-dir %s", u.h.name, pluginBin, u.h.dataDir); !strings.Contains(out, "no rule pref "+ourRulePrio) {
		t.Errorf("external-ip status does not name the missing rule:\n%s", out)
	}
	u.gc(a)
	if err := u.check(a); err != nil {
		t.Fatalf("CHECK after GC: %v", err)
	}
	mustAsk(t, "the client after GC", nsPath(u.client), "tcp", eip4, svPort, "a", cliV4)
}

func TestARouteOfAnotherProgramInOurTableIsLeftAndTheNextTableIsTaken(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	u.h.inNode("ip route add 10.99.0.0/24 dev uplink0 table %s", ourFirstTable)
	a := u.add("a", eip4)
	serve(t, a.netns, "a", svPort)
	mustAsk(t, "the client behind the router", nsPath(u.client), "tcp", eip4, svPort, "a", cliV4)
	if !strings.Contains(u.h.inNode("ip rule"), "lookup 4242") {
		t.Errorf("rules %q: want slot 2's table 4242, table %s being another program's", u.h.inNode("ip rule"), ourFirstTable)
	}
	u.del(a)
	if got := u.h.inNode("ip route show table %s", ourFirstTable); !strings.Contains(got, "10.99.0.0/24 dev uplink0") {
		t.Errorf("the other program's route in table %s is gone: %q", ourFirstTable, got)
	}
	if got := u.ourObjects(); len(got) != 0 {
		t.Errorf("after the last DEL these of ours are left: %q", got)
	}
}

// rp_filter 1 checks a packet's source with the packet mark only where
// src_valid_mark is on; the plugin turns it on for the uplinks it routes.
// Turned off by hand, the client's packets fail the check.
func TestStrictRPFilterWorksBecauseThePluginSetsSrcValidMarkOnTheUplink(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{})
	a := u.add("a", eip4)
	serve(t, a.netns, "a", svPort)
	if got := strings.TrimSpace(u.h.inNode("sysctl -n net.ipv4.conf.uplink1.src_valid_mark")); got != "1" {
		t.Fatalf("net.ipv4.conf.uplink1.src_valid_mark is %s after ADD, want 1", got)
	}
	mustAsk(t, "the client with rp_filter 1", nsPath(u.client), "tcp", eip4, svPort, "a", cliV4)
	u.h.inNode("sysctl -qw net.ipv4.conf.uplink1.src_valid_mark=0")
	if name, _, err := ask(t, nsPath(u.client), "tcp", eip4, svPort); err == nil {
		t.Fatalf("with src_valid_mark off and rp_filter 1, %s still answered: the check does not need it", name)
	}
}
