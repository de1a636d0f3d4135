package netns

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
)

// One L2 segment, one node answering for an IP. Node 1 holds the IP, as a
// route with its proxy entry or as an address, IPv4 or IPv6; node 2's ADD
// of it is refused alike in every case (code 103, one message shape), and
// a solicitation from the LAN gets one answer, node 1's. In route mode
// IPv4 used to be taken by node 2 too: node 1's proxy entry does not
// answer an RFC 5227 probe (sender 0.0.0.0), and the LAN then got two
// answers, its traffic flipping between the nodes.
func TestASecondNodeIsRefusedAnIPTheFirstHoldsInEitherModeAndFamily(t *testing.T) {
	shapes := map[string]string{}
	for _, hold := range []string{"route", "address"} {
		for _, ip := range []netip.Addr{netip.MustParseAddr("192.0.2.71"), netip.MustParseAddr("2001:db8:1::71")} {
			t.Run(hold+"/"+ip.String(), func(t *testing.T) {
				msg := refusedWhereHeld(t, hold, ip)
				shapes[hold+" "+ip.String()] = strings.ReplaceAll(msg, ip.String(), "IP")
			})
		}
	}
	var first string
	for k, shape := range shapes {
		if first == "" {
			first = shape
		}
		if shape != first {
			t.Errorf("the refusals differ in shape: %s reads %q, another %q", k, shape, first)
		}
	}
}

// refusedWhereHeld has node 1 hold ip the hold way, node 2 ask for it, and
// returns node 2's refusal.
func refusedWhereHeld(t *testing.T, hold string, ip netip.Addr) string {
	nodes := newBridgedNodes(t)
	for _, n := range nodes {
		n.forwardIPv4() // a node that steers forwards; route mode needs it
	}
	conf := func(n *host) map[string]any {
		return n.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip.String()), "hold": hold,
			"conflictProbe": probeWindow.String(), "announce": map[string]any{"count": 1}})
	}
	nodes[0].run(attach("ADD", "c1", conf(nodes[0]))).mustOK(t, "ADD on node1")
	if r, p := nodes[0].routeState(ip.String()); (hold == "route") != (r && p) {
		t.Fatalf("node1 holds %s as a route (%v) with its proxy entry (%v); want hold %s", ip, r, p, hold)
	}
	before := nodes[1].settledView()
	r := nodes[1].run(attach("ADD", "c2", conf(nodes[1])))
	r.mustFail(t, "ADD on node2 of the IP node1 holds as "+hold, codeConflict, ip.String()+": another host ("+bridgedNodes[0].mac+")", "uplink0")
	nodes[1].mustBeUnchanged(t, "the refused ADD on node2", before)
	macs := answersOnTheLAN(t, nodes[0].lan, ip)
	if len(macs) != 1 || macs[0] != bridgedNodes[0].mac {
		t.Errorf("one solicitation for %s from the LAN was answered by %v; want node1 (%s) alone", ip, macs, bridgedNodes[0].mac)
	}
	return r.msg
}

// answersOnTheLAN sends one solicitation for ip from the LAN host's br0 (an
// ARP request, a neighbour solicitation) and returns the MACs that
// answered within 500 ms, each answer counted.
func answersOnTheLAN(t *testing.T, lan string, ip netip.Addr) []string {
	t.Helper()
	var macs []string
	err := inNS(t, nsPath(lan), func() error {
		ifi, err := net.InterfaceByName("br0")
		if err != nil {
			return err
		}
		if ip.Is4() {
			macs, err = arpAnswers(ifi, ip)
		} else {
			macs, err = naAnswers(ifi, ip)
		}
		return err
	})
	if err != nil {
		t.Fatalf("soliciting %s from the LAN: %v", ip, err)
	}
	return macs
}

func arpAnswers(ifi *net.Interface, ip netip.Addr) ([]string, error) {
	c, err := arp.Dial(ifi)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Request(ip); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var macs []string
	for {
		p, _, err := c.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return macs, nil // the end of the 500 ms
		}
		if err != nil {
			return macs, err
		}
		if p.Operation == arp.OperationReply && p.SenderIP == ip {
			macs = append(macs, p.SenderHardwareAddr.String())
		}
	}
}

func naAnswers(ifi *net.Interface, ip netip.Addr) ([]string, error) {
	var macs []string
	err := solicitNAs(ifi, ip, 500*time.Millisecond, func(mac net.HardwareAddr) bool {
		macs = append(macs, mac.String()) // an answer without the option is still one
		return false
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil // the end of the 500 ms
	}
	return macs, err
}

// Several nodes may hold one IP only where no LAN sees two answers: on a
// routed fabric, where the IP is outside every subnet of the nodes'
// segment and the routers reach it through each node's routing daemon.
// Where the nodes still share one L2 segment, the probe sees the other
// node's proxy entry, whatever the IP's subnet, and refuses; with the
// probe and the announcements off, both hold it (and a solicitation from
// the segment, which nothing there sends for such an IP, would get two
// answers: the reason the keys are on by default).
func TestOnASharedSegmentSeveralNodesHoldARoutedIPOnlyWithProbeAndAnnouncementsOff(t *testing.T) {
	for _, ip := range []netip.Addr{netip.MustParseAddr("198.51.100.71"), netip.MustParseAddr("2001:db8:ff::71")} {
		t.Run(ip.String(), func(t *testing.T) {
			nodes := newBridgedNodes(t)
			conf := func(n *host, extra map[string]any) map[string]any {
				c := n.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip.String()), "hold": "route",
					"uplink": "uplink0", "allowedRanges": []string{"198.51.100.0/24", "2001:db8:ff::/64"}})
				for k, v := range extra {
					c[k] = v
				}
				return c
			}
			for _, n := range nodes {
				n.forwardIPv4()
			}
			fabric := map[string]any{"conflictProbe": "0s", "announce": map[string]any{"count": 0}}
			nodes[0].run(attach("ADD", "c1", conf(nodes[0], fabric))).mustOK(t, "ADD on node1")
			nodes[1].run(attach("ADD", "c2", conf(nodes[1], map[string]any{"conflictProbe": probeWindow.String()}))).
				mustFail(t, "ADD on node2 with the probe on", codeConflict, ip.String()+": another host ("+bridgedNodes[0].mac+")")
			nodes[1].run(attach("ADD", "c2", conf(nodes[1], fabric))).mustOK(t, "ADD on node2 with probe and announcements off")
			if macs := answersOnTheLAN(t, nodes[0].lan, ip); len(macs) != 2 {
				t.Errorf("a solicitation for %s on the shared segment was answered by %v; want both nodes", ip, macs)
			}
		})
	}
}

// Another program's proxy entry for the IP, on an uplink whose proxy_delay
// is the kernel's default (0.8 s: the answer to a broadcast question comes
// after a random delay below it), is seen by a probe whose window exceeds
// that delay. Nodes running external-ip set it to 0 and answer at once.
func TestAProbeLongerThanTheHoldersProxyDelaySeesAnotherProgramsProxyEntry(t *testing.T) {
	for _, ip := range []netip.Addr{netip.MustParseAddr("192.0.2.75"), netip.MustParseAddr("2001:db8:1::75")} {
		t.Run(ip.String(), func(t *testing.T) {
			nodes := newBridgedNodes(t)
			n := nodes[0]
			n.forwardIPv4()
			fam, delay := "-4", "net.ipv4.neigh.uplink0.proxy_delay"
			if ip.Is6() {
				fam, delay = "-6", "net.ipv6.neigh.uplink0.proxy_delay"
				n.inNode("sysctl -qw net.ipv6.conf.uplink0.proxy_ndp=1")
			}
			if got := strings.TrimSpace(n.inNode("sysctl -n %s", delay)); got != "80" {
				t.Fatalf("%s is %s; the test needs the kernel's default, 80 (0.8 s)", delay, got)
			}
			n.inNode("ip %s route add %s dev lo", fam, ip)
			n.inNode("ip %s neigh add proxy %s dev uplink0", fam, ip)
			conf := nodes[1].netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip.String()), "conflictProbe": "1s"})
			nodes[1].run(attach("ADD", "c2", conf)).mustFail(t, "ADD on node2 with a 1 s probe",
				codeConflict, ip.String()+": another host ("+bridgedNodes[0].mac+")")
		})
	}
}
