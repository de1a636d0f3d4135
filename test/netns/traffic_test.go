package netns

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/forget"
)

// families runs f for IPv4 and IPv6: the external IP, the LAN host's
// address and the container's address of that family.
func families(t *testing.T, f func(t *testing.T, ext, lan string, addr func(*container) string)) {
	t.Run("IPv4", func(t *testing.T) {
		f(t, extV4, lanV4, func(c *container) string { return c.v4.String() })
	})
	t.Run("IPv6", func(t *testing.T) {
		f(t, extV6, lanV6, func(c *container) string { return c.v6.String() })
	})
}

func TestLANReachesTheContainerAtItsExternalIPAndSeesItLeaveFromIt(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4, extV6)
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(w.h.lan), "lan", lanSv)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		mustAsk(t, "LAN to the external IP over TCP", nsPath(w.h.lan), "tcp", ext, svPort, "a", lan)
		mustAsk(t, "LAN to the external IP over UDP", nsPath(w.h.lan), "udp", ext, svPort, "a", lan)
		w.pingAnsweredByContainer(t, a, ext)
		// With the bridge's ipMasq on, a flow not steered would arrive from
		// the node's uplink address.
		mustAsk(t, "the container to the LAN", a.netns, "tcp", lan, lanSv, "lan", ext)
		js := w.nftTable()
		for _, want := range []string{ext, addr(a)} {
			if !strings.Contains(js, `"`+want+`"`) {
				t.Errorf("nft -j list table inet external-ip does not name %s:\n%s", want, js)
			}
		}
	})
	if err := w.check(a); err != nil {
		t.Errorf("CHECK of a steered container failed: %v", err)
	}
}

func TestTheNodeAndOtherContainersReachTheContainerAtItsExternalIP(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4, extV6)
	b := w.add("b")
	serve(t, a.netns, "a", svPort)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		mustAsk(t, "the node to the external IP", nsPath(w.h.name), "tcp", ext, svPort, "a", "")
		mustAsk(t, "another container to the external IP", b.netns, "tcp", ext, svPort, "a", "")
		mustAsk(t, "the container to its own external IP (hairpin)", a.netns, "tcp", ext, svPort, "a", "")
		mustAsk(t, "another container over UDP", b.netns, "udp", ext, svPort, "a", "")
	})
}

func TestTwoHoldersShareNewFlowsAndTheOneLeftGetsThemAll(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4, extV6)
	b := w.add("b", extV4, extV6)
	serve(t, a.netns, "a", svPort)
	serve(t, b.netns, "b", svPort)
	count := func(t *testing.T, ext string) map[string]int {
		seen := map[string]int{}
		for i := range 40 {
			name, _, err := ask(t, nsPath(w.h.lan), "tcp", ext, svPort)
			if err != nil {
				t.Fatalf("connection %d to %s: %v", i, ext, err)
			}
			seen[name]++
		}
		return seen
	}
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if seen := count(t, ext); seen["a"] == 0 || seen["b"] == 0 {
			t.Fatalf("40 connections to %s went %v, want some to each holder", ext, seen)
		}
	})
	w.del(b)
	deleted := time.Now()
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if seen := count(t, ext); seen["a"] != 40 {
			t.Fatalf("after b's DEL, 40 connections to %s went %v, want all to a", ext, seen)
		}
	})
	// The flows that went to b are deleted off DEL's path (the bound is
	// TestADelOnABusyNodeCleansConntrackOffTheLockWithinTheBound's).
	w.goneWithin(b, 10*forget.Bound, deleted)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if js := w.nftTable(); strings.Contains(js, `"`+addr(b)+`"`) {
			t.Errorf("the table still names the gone holder %s:\n%s", addr(b), js)
		}
	})
	w.del(a)
	if js := w.nftTable(); strings.Contains(js, extV4) || strings.Contains(js, extV6) {
		t.Errorf("after the last DEL the table still names the external IPs:\n%s", js)
	}
}

// conntrackTo lists the node's conntrack entries to ext that went to target.
func (w *world) conntrackTo(ext, target string) string {
	w.t.Helper()
	fam := "ipv4"
	if strings.Contains(ext, ":") {
		fam = "ipv6"
	}
	out, err := w.h.try("ip netns exec %s conntrack -L -f %s --orig-dst %s --reply-src %s", w.h.name, fam, ext, target)
	if err != nil && !strings.Contains(out, "0 flow entries") {
		w.t.Fatalf("conntrack -L: %v: %s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ext) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

func TestTrafficNoneLeavesTheIPOnTheNodeAsBefore(t *testing.T) {
	w := newWorld(t, "none")
	a := w.add("a", extV4, extV6)
	serve(t, a.netns, "a", svPort)
	serve(t, nsPath(w.h.lan), "lan", lanSv)
	serve(t, nsPath(w.h.name), "node", svPort)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		mustAsk(t, "LAN to the external IP", nsPath(w.h.lan), "tcp", ext, svPort, "node", lan)
		name, client, err := ask(t, a.netns, "tcp", lan, lanSv)
		if err != nil || client == ext {
			t.Fatalf("the container's flow to the LAN: %s saw it from %s (%v), want not from the external IP", name, client, err)
		}
	})
	if js := w.nftTable(); js != "" {
		t.Errorf("traffic none made table inet external-ip:\n%s", js)
	}
}

func TestEgressOnlyAndIngressOnlySteerOneWay(t *testing.T) {
	for _, mode := range []string{"ingress", "egress"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, mode)
			a := w.add("a", extV4)
			serve(t, a.netns, "a", svPort)
			serve(t, nsPath(w.h.lan), "lan", lanSv)
			serve(t, nsPath(w.h.name), "node", svPort)
			want := map[string]string{"ingress": "a", "egress": "node"}[mode]
			mustAsk(t, "LAN to the external IP", nsPath(w.h.lan), "tcp", extV4, svPort, want, lanV4)
			_, client, err := ask(t, a.netns, "tcp", lanV4, lanSv)
			if err != nil || (client == extV4) != (mode == "egress") {
				t.Fatalf("traffic %s: the container's flow arrived from %s (%v)", mode, client, err)
			}
		})
	}
}

func TestAnIPOfAFamilyTheContainerLacksIsRefusedWithCode7(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"traffic": "both", "runtimeConfig": runtimeIPs(extV4, extV6)})
	pr := prevResult(t, "1.0.0")
	pr["ips"] = pr["ips"].([]any)[:1] // IPv4 only
	conf["prevResult"] = pr
	before := h.settledView()
	h.run(attach("ADD", "c1", conf)).mustFail(t, "ADD of an IPv6 IP for an IPv4-only container", 7, extV6, "IPv6")
	h.mustBeUnchanged(t, "the refused ADD", before)
	if out, err := h.try("ip netns exec %s nft list table inet external-ip", h.name); err == nil {
		t.Errorf("the refused ADD made table inet external-ip:\n%s", out)
	}
	conf["traffic"] = "none"
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD with traffic none")
}

// pingAnsweredByContainer pings ext from the LAN, then again with the
// container ignoring echo requests: only if that one goes unanswered was
// it the container, not the node, that answered the first.
func (w *world) pingAnsweredByContainer(t *testing.T, c *container, ext string) {
	t.Helper()
	ignore := "net.ipv4.icmp_echo_ignore_all"
	if strings.Contains(ext, ":") {
		ignore = "net.ipv6.icmp.echo_ignore_all"
	}
	w.h.sh("ip netns exec %s ping -c 1 -W 2 %s", w.h.lan, ext)
	w.h.sh("ip netns exec %s sysctl -qw %s=1", c.id, ignore)
	defer w.h.sh("ip netns exec %s sysctl -qw %s=0", c.id, ignore)
	if out, err := w.h.try("ip netns exec %s ping -c 1 -W 1 %s", w.h.lan, ext); err == nil {
		t.Fatalf("ping to %s was answered with the container ignoring pings: the node answered, not the container:\n%s", ext, out)
	}
}

// A flow that another program DNATs to a steered container from its
// bridge neighbour is not ours: our hairpin masquerade must leave it, so
// the container sees the neighbour's own address (the conntrack entry's
// reply goes to the neighbour, not to the bridge's address).
func TestAForeignDNATToASteeredContainerIsNotMasqueradedByUs(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4, extV6)
	b := w.add("b")
	vips := map[string]string{extV4: "198.51.100.7", extV6: "2001:db8:ff::7"}
	w.h.inNode("nft add table inet eipt-foreign")
	t.Cleanup(func() { w.h.try("ip netns exec %s nft delete table inet eipt-foreign", w.h.name) })
	w.h.inNode("nft add chain inet eipt-foreign pre { type nat hook prerouting priority dstnat \\; }")
	w.h.inNode("nft add rule inet eipt-foreign pre ip daddr %s udp dport %s dnat ip to %s", vips[extV4], svPort, a.v4)
	w.h.inNode("nft add rule inet eipt-foreign pre ip6 daddr %s udp dport %s dnat ip6 to %s", vips[extV6], svPort, a.v6)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		vip := vips[ext]
		err := inNS(t, b.netns, func() error {
			c, err := net.Dial("udp", net.JoinHostPort(vip, svPort))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("hello"))
			return err
		})
		if err != nil {
			t.Fatalf("sending from b to %s: %v", vip, err)
		}
		out := w.h.inNode("conntrack -L -p udp --orig-dst %s", vip)
		f := strings.Fields(out)
		var dsts []string
		for _, x := range f {
			if d, ok := strings.CutPrefix(x, "dst="); ok {
				dsts = append(dsts, d)
			}
		}
		if len(dsts) != 2 || dsts[1] != addr(b) {
			t.Fatalf("the foreign DNAT's entry replies to %v, want b's own %s (masqueraded by our table?):\n%s", dsts, addr(b), out)
		}
	})
}

// A routed pod network (Calico's BGP, flannel's host-gw: no
// encapsulation) sends a pod's flow to a pod of another node out of the
// uplink, and the SNAT rule keys on the source and the output interface
// alone: the other node's pod sees the external IP, not the pod's
// address, although its reply route to the pod's subnet exists. The LAN
// namespace plays the other node, with its pod's address on lan0. This
// is the documented behaviour without egressExcludedCIDRs
// (docs/traffic.md); with it, exclusion_test.go.
func TestAFlowToAPodOfAnotherNodeOverARoutedPodNetworkLeavesFromTheExternalIP(t *testing.T) {
	w := newWorld(t, "both")
	a := w.add("a", extV4)
	serve(t, nsPath(w.h.lan), "lan", lanSv)
	w.h.sh("ip -n %s addr add 10.99.0.7/32 dev lan0", w.h.lan)
	w.h.sh("ip -n %s route add 10.88.0.0/24 via %s", w.h.lan, nodeV4)
	w.h.inNode("ip route add 10.99.0.0/24 via %s dev uplink0", lanV4)
	mustAsk(t, "pod a to the other node's pod", a.netns, "tcp", "10.99.0.7", lanSv, "lan", extV4)
}
