package netns

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/test/bench/standbyrows"
)

// Standby: node 1 holds an IP actively, node 2 in standby (its ADD
// succeeds), each node's process watching (`install --watch`). Each test
// faults node 1 in one way and shows that node 2 takes the IP over and
// that, after, the LAN gets one answer only, node 2's. The failover time
// is measured from the LAN host, the client: from the fault to the first
// answer from node 2 to its solicitations (one every 30 ms). It is
// printed against its goal, not asserted: make bench prints the goals.

var standbyIPs = []netip.Addr{netip.MustParseAddr("192.0.2.81"), netip.MustParseAddr("2001:db8:1::81")}

// standbyPair has node 1 hold ip actively and node 2 in standby, and
// starts the node process on the nodes named by watch.
type standbyPair struct {
	nodes [2]*host
	ip    netip.Addr
	logs  [2]string
	extra map[string]any // more keys of the network config
	// pods are each node's container namespace (ip netns), a real one, as
	// the runtime's CNI_NETNS names it: the health gate looks at it.
	pods [2]string
}

func newStandbyPair(t *testing.T, ip netip.Addr, watch ...int) *standbyPair {
	return newStandbyPairWith(t, ip, nil, watch...)
}

func newStandbyPairWith(t *testing.T, ip netip.Addr, extra map[string]any, watch ...int) *standbyPair {
	p := &standbyPair{nodes: newBridgedNodes(t), ip: ip, extra: extra}
	for i, n := range p.nodes {
		n.forwardIPv4() // a node that steers forwards; route mode needs it
		p.pods[i] = "eipc" + string(rune('1'+i)) + "-" + randomID(4)
		n.sh("ip netns add %s", p.pods[i])
		t.Cleanup(func() { p.delPod(t, i) })
	}
	p.nodes[0].run(p.attach("ADD", 0)).mustOK(t, "ADD on node1")
	r := p.nodes[1].run(p.attach("ADD", 1))
	r.mustOK(t, "ADD on node2 of the IP node1 holds, standby on")
	if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[0].mac {
		t.Fatalf("before any fault %s is answered by %v; want node1 alone (node2 stands by)", ip, got)
	}
	if !strings.Contains(p.nodes[1].inNode("%s status --data-dir %s", pluginBin, p.nodes[1].dataDir), "STANDBY") {
		t.Errorf("node2's status does not show %s in standby", ip)
	}
	for _, i := range watch {
		entry := map[string]any{"type": "external-ip", "dataDir": p.nodes[i].dataDir, "allowedRanges": []string{subnet4, subnet6}}
		p.logs[i] = p.nodes[i].startWatch(t, pluginBin, entry, "--standby-every", "200ms")
		p.nodes[i].eventually(t, 20*time.Second, "node"+string(rune('1'+i))+"'s standby watch reading the IP", func() bool {
			b, _ := os.ReadFile(p.logs[i])
			return strings.Contains(string(b), `"msg":"watching an IP of a network that stands by","ip":"`+ip.String())
		})
	}
	time.Sleep(600 * time.Millisecond) // node2's watch has heard node1 answer its checks
	return p
}

// attach is node i's call of its pod's attachment.
func (p *standbyPair) attach(command string, i int) call {
	c := attach(command, "c"+string(rune('1'+i)), p.conf(i))
	c.netns = "/var/run/netns/" + p.pods[i]
	return c
}

// delPod deletes node i's container namespace, if it is still there.
func (p *standbyPair) delPod(t *testing.T, i int) {
	if _, err := os.Stat("/var/run/netns/" + p.pods[i]); err == nil {
		p.nodes[i].sh("ip netns del %s", p.pods[i])
	}
}

func (p *standbyPair) conf(i int) map[string]any {
	c := p.nodes[i].netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(p.ip.String()),
		"standby": true, "conflictProbe": probeWindow.String(), "announce": map[string]any{"count": 1}})
	for k, v := range p.extra {
		c[k] = v
	}
	return c
}

// answers are the MACs that answer one solicitation for the IP from the
// LAN host, each once: a takeover's later announcement rounds (a
// gratuitous reply, an unsolicited advertisement) may fall in the window.
func (p *standbyPair) answers(t *testing.T) []string {
	macs := answersOnTheLAN(t, p.nodes[0].lan, p.ip)
	slices.Sort(macs)
	return slices.Compact(macs)
}

// failover waits, from the fault at start, for node 2's first answer on
// the LAN, prints the time against goal, and then checks that node 2
// alone answers.
func (p *standbyPair) failover(t *testing.T, what string, start time.Time, goal time.Duration) {
	t.Helper()
	took, err := standbyrows.FirstAnswer(p.nodes[0].lan, p.ip, bridgedNodes[1].mac, start, 10*time.Second)
	if err != nil {
		for i, l := range p.logs {
			if l != "" {
				b, _ := os.ReadFile(l)
				t.Logf("node%d's log:\n%s", i+1, b)
			}
		}
		t.Fatalf("%s: node2 never answered for %s: %v", what, p.ip, err)
	}
	t.Logf("%s: the client's first answer from node2 came %s after the fault (goal: at most %s)", what, took.Round(time.Millisecond), goal)
	if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[1].mac {
		t.Errorf("%s: after the takeover %s is answered by %v; want node2 alone", what, p.ip, got)
	}
}

func TestAStandbyTakesOverWhenTheActiveNodesUplinkIsPulledAndTheActiveStaysStandbyWhenItComesBack(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 0, 1)
			start := time.Now()
			p.nodes[0].inNode("ip link set uplink0 down")
			p.failover(t, "node1's uplink pulled", start, time.Second)
			// It stands by while its uplink is still down: a yield that needs
			// the uplink up would leave it active, to preempt when it is back.
			p.nodes[0].eventually(t, 5*time.Second, "node1 standing by with its uplink down", func() bool {
				return strings.Contains(p.nodes[0].inNode("%s status --data-dir %s", pluginBin, p.nodes[0].dataDir), "STANDBY")
			})
			p.nodes[0].inNode("ip link set uplink0 up")
			p.nodes[0].waitIPv6Ready(p.nodes[0].name, "uplink0")
			time.Sleep(2 * time.Second)
			if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[1].mac {
				t.Errorf("node1's uplink back: %s is answered by %v; want node2 alone (no preemption)", ip, got)
			}
			if st := p.nodes[0].inNode("%s status --data-dir %s", pluginBin, p.nodes[0].dataDir); !strings.Contains(st, "STANDBY") {
				b, _ := os.ReadFile(p.logs[0])
				t.Errorf("node1, back, does not hold %s in standby; its status:\n%s\nits node process's log:\n%s", ip, st, b)
			}
		})
	}
}

// The standby loses its carrier (its port on the LAN's bridge goes down):
// its checks go nowhere, yet it must not take over, or node1 would lose
// the IP to it when the carrier comes back (node1's MAC is the lower).
func TestAStandbyCutOffTheLANNeverTakesOverAndTheActiveKeepsTheIP(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 0, 1)
			lan := p.nodes[1].lan
			p.nodes[1].sh("ip -n %s link set node2 down", lan)
			time.Sleep(2 * time.Second) // ten check periods
			p.nodes[1].sh("ip -n %s link set node2 up", lan)
			p.nodes[1].waitIPv6Ready(p.nodes[1].name, "uplink0")
			time.Sleep(2 * time.Second)
			b, _ := os.ReadFile(p.logs[1])
			if strings.Contains(string(b), `"msg":"took over"`) {
				t.Errorf("node2, cut off the LAN, took %s over; its log:\n%s", ip, b)
			}
			if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[0].mac {
				t.Errorf("node2's carrier back: %s is answered by %v; want node1 alone", ip, got)
			}
		})
	}
}

// A node whose uplink has no carrier at its ADD (a node booting before its
// link is negotiated) hears no probe answer: it must stand by, not hold
// the IP as a second active; once the LAN is back and no node answers its
// checks, its watch takes the IP over.
func TestAStandbyAddWithNoCarrierStandsByAndTakesOverOnceTheLANIsBack(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := &standbyPair{nodes: newBridgedNodes(t), ip: ip}
			n := p.nodes[1]
			n.forwardIPv4()
			p.pods[1] = "eipc2-" + randomID(4)
			n.sh("ip netns add %s", p.pods[1])
			t.Cleanup(func() { p.delPod(t, 1) })
			n.sh("ip -n %s link set node2 down", n.lan)
			n.run(p.attach("ADD", 1)).mustOK(t, "ADD on node2 cut off the LAN, standby on")
			if st := n.inNode("%s status --data-dir %s", pluginBin, n.dataDir); !strings.Contains(st, "STANDBY") {
				t.Fatalf("node2, cut off the LAN, does not hold %s in standby:\n%s", ip, st)
			}
			n.sh("ip -n %s link set node2 up", n.lan)
			n.waitIPv6Ready(n.name, "uplink0")
			entry := map[string]any{"type": "external-ip", "dataDir": n.dataDir, "allowedRanges": []string{subnet4, subnet6}}
			p.logs[1] = n.startWatch(t, pluginBin, entry, "--standby-every", "200ms")
			n.eventually(t, 10*time.Second, "node2 taking "+ip.String()+" over", func() bool {
				b, _ := os.ReadFile(p.logs[1])
				return strings.Contains(string(b), `"msg":"took over"`)
			})
			if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[1].mac {
				t.Errorf("after node2's takeover %s is answered by %v; want node2 alone", ip, got)
			}
		})
	}
}

func TestAStandbyTakesOverWhenTheActiveNodeIsGone(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 1)
			start := time.Now()
			p.nodes[0].sh("ip netns del %s", p.nodes[0].name)
			p.failover(t, "node1's namespace deleted", start, time.Second)
		})
	}
}

func TestADelOfTheActiveHandsTheIPToTheStandbyAtOnce(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 1)
			start := time.Now()
			p.nodes[0].run(p.attach("DEL", 0)).mustOK(t, "DEL on node1")
			p.failover(t, "node1's DEL of the last holder", start, 300*time.Millisecond)
		})
	}
}

// Node 1's pod is gone without a DEL (its container's namespace deleted,
// as when a runtime loses a sandbox): node 1's health gate gives the IP up
// with a goodbye, so node 2 takes over without waiting for its checks to
// go unanswered (which they never would: node 1's holder still answers).
func TestAStandbyTakesOverWhenTheActivesContainersAreGone(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 0, 1)
			start := time.Now()
			p.delPod(t, 0)
			p.failover(t, "node1's pod gone without its DEL", start, time.Second)
			b, _ := os.ReadFile(p.logs[0])
			if !strings.Contains(string(b), `"reason":"containers-gone"`) {
				t.Errorf("node1's log does not say it gave %s up for its containers:\n%s", ip, b)
			}
			if !strings.Contains(p.nodes[0].inNode("%s status --data-dir %s", pluginBin, p.nodes[0].dataDir), "STANDBY") {
				t.Errorf("node1 does not hold %s in standby after its containers went", ip)
			}
		})
	}
}

// Node 1's node process is killed while its holder stays: the
// IP stays on node 1, which still answers, and node 2 keeps standing by;
// node 2's DEL then changes nothing on the LAN.
func TestAnActiveWithoutItsNodeProcessKeepsTheIPAndADelOfTheStandbyChangesNothing(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 0, 1)
			entry := filepath.Join(filepath.Dir(p.logs[0]), "entry.json") // on node1's command line alone
			if out, err := exec.Command("pkill", "-KILL", "-f", entry).CombinedOutput(); err != nil {
				t.Fatalf("killing node1's node process: %v\n%s", err, out)
			}
			time.Sleep(2 * time.Second) // ten check periods
			if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[0].mac {
				t.Errorf("with node1's holder answering and its node process killed, %s is answered by %v; want node1 alone", ip, got)
			}
			p.nodes[1].run(p.attach("DEL", 1)).mustOK(t, "DEL on node2")
			if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[0].mac {
				t.Errorf("after the standby's DEL %s is answered by %v; want node1 alone", ip, got)
			}
		})
	}
}

// A partition: node1's port leaves the LAN's bridge (its carrier stays
// up, so its health gate sees nothing); node2 takes over. Healed, both
// hold the IP actively until one of them hears the other: the one with
// the lower MAC (node1) yields, and the LAN then gets one answer, stably.
func TestAHealedPartitionLeavesOneActiveAndNoFlapping(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPair(t, ip, 0, 1)
			lan := p.nodes[0].lan
			start := time.Now()
			p.nodes[0].sh("ip -n %s link set node1 nomaster", lan)
			p.failover(t, "node1 cut off the LAN", start, time.Second)
			healed := time.Now()
			p.nodes[0].sh("ip -n %s link set node1 master br0", lan)
			p.nodes[0].eventually(t, 10*time.Second, "node1 yielding", func() bool {
				b, _ := os.ReadFile(p.logs[0])
				return strings.Contains(string(b), `"msg":"yielded: now in standby"`)
			})
			t.Logf("partition healed: node1 yielded %s after (goal: within one check period, 200ms)", time.Since(healed).Round(time.Millisecond))
			for range 4 {
				if got := p.answers(t); len(got) != 1 || got[0] != bridgedNodes[1].mac {
					t.Fatalf("after the partition healed %s is answered by %v; want node2 alone, stably", ip, got)
				}
			}
		})
	}
}

// With the defaults of a steering network (traffic both, so hold route),
// the standby holds the IP as the ADD would have: a route with its proxy
// entry, the table steering it to the local holder.
func TestATakeoverHoldsAndSteersTheIPAsTheNetworkSays(t *testing.T) {
	for _, ip := range standbyIPs {
		t.Run(ip.String(), func(t *testing.T) {
			p := newStandbyPairWith(t, ip, map[string]any{"traffic": "both"}, 1)
			if r, px := p.nodes[1].routeState(ip.String()); r || px {
				t.Fatalf("node2 in standby has a route (%v) or proxy entry (%v) for %s", r, px, ip)
			}
			start := time.Now()
			p.nodes[0].run(p.attach("DEL", 0)).mustOK(t, "DEL on node1")
			p.failover(t, "node1's DEL, a steered IP held as a route", start, 300*time.Millisecond)
			if r, px := p.nodes[1].routeState(ip.String()); !r || !px {
				t.Errorf("node2 took %s over without its route (%v) or proxy entry (%v)", ip, r, px)
			}
			if out := p.nodes[1].inNode("nft list table inet external-ip"); !strings.Contains(out, ip.String()) {
				t.Errorf("node2's table does not steer %s after the takeover:\n%s", ip, out)
			}
			if out, err := p.nodes[1].try("ip netns exec %s %s status --data-dir %s", p.nodes[1].name, pluginBin, p.nodes[1].dataDir); err != nil || !strings.Contains(out, "drift: none") {
				t.Errorf("node2's status after the takeover: %v\n%s", err, out)
			}
		})
	}
}

// TestAStandbyAddHearingOnlyAnotherHostsProbeHoldsTheIPActively: a pod
// moves; the old node's goodbye (an RFC 5227 probe) lands in the new
// node's probe window, and nobody answers. There is no active to stand by
// for: the ADD must hold the IP actively at once, not in standby until
// three checks go unanswered.
func TestAStandbyAddHearingOnlyAnotherHostsProbeHoldsTheIPActively(t *testing.T) {
	h := newHost(t)
	h.waitLAN()
	ip := netip.MustParseAddr("192.0.2.82")
	stop := h.lanProbesFor(t, ip, 10*time.Millisecond)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip.String()), "standby": true, "conflictProbe": "300ms"})
	r := h.run(attach("ADD", "c1", conf))
	sent := stop()
	r.mustOK(t, "standby ADD while another host probes for the IP")
	if sent < 2 {
		t.Fatalf("the LAN host sent %d probes during the ADD: the test proves nothing", sent)
	}
	if st := h.inNode("%s status --data-dir %s", pluginBin, h.dataDir); strings.Contains(st, "STANDBY") {
		t.Errorf("the ADD holds %s in standby, standing by for a host that only probed:\n%s", ip, st)
	}
	h.mustHold(t, "after the ADD", "eip0", ip.String()+"/32")
}

// lanProbesFor has the LAN host send an RFC 5227 probe for ip every
// period, as a node saying goodbye does, until the returned stop, which
// says how many it sent.
func (h *host) lanProbesFor(t *testing.T, ip netip.Addr, period time.Duration) (stop func() int) {
	t.Helper()
	mac, err := net.ParseMAC(h.linkMAC(h.lan, "lan0"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := arp.NewPacket(arp.OperationRequest, mac, netip.IPv4Unspecified(), make(net.HardwareAddr, 6), ip)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: mac, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := h.lanPacketConn(t, unix.ETH_P_ARP)
	done, count := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if _, err := c.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err == nil {
				n++
			}
			select {
			case <-done:
				count <- n
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { close(done); return <-count }
}

// lanPacketConn is a packet socket on the LAN host's lan0, closed when t
// ends.
func (h *host) lanPacketConn(t *testing.T, proto int) *packet.Conn {
	t.Helper()
	n, err := ns.GetNS(filepath.Join("/var/run/netns", h.lan))
	if err != nil {
		t.Fatalf("opening namespace %s: %v", h.lan, err)
	}
	defer n.Close()
	var c *packet.Conn
	if err := n.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("lan0")
		if err == nil {
			c, err = packet.Listen(ifi, packet.Raw, proto, nil)
		}
		return err
	}); err != nil {
		t.Fatalf("opening a packet socket on lan0 in %s: %v", h.lan, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A DEL whose standby key is wrong (a DEL takes it as false) still says
// goodbye as the ADD's record stands by: node 2 takes over on the
// goodbye, not once its checks go unanswered.
func TestADelWithAnInvalidStandbyKeyStillSaysGoodbye(t *testing.T) {
	p := newStandbyPair(t, standbyIPs[0], 1)
	del := p.attach("DEL", 0)
	del.conf["standby"] = "yes"
	start := time.Now()
	p.nodes[0].run(del).mustOK(t, "DEL on node1 with standby \"yes\"")
	p.failover(t, "node1's DEL with an invalid standby key", start, 300*time.Millisecond)
	b, _ := os.ReadFile(p.logs[1])
	if !strings.Contains(string(b), `"reason":"goodbye"`) {
		t.Errorf("node2 did not take over on node1's goodbye:\n%s", b)
	}
}
