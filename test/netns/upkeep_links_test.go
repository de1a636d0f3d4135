package netns

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
)

// repairPeriod is the DaemonSet's --repair-every: what the LAN would wait
// without the link watch.
const repairPeriod = 60 * time.Second

// askUntilAnswered solicits ip from the LAN host until an answer comes,
// each try waiting at most 100 ms, for up to bound; it returns how long
// from start the answer took.
func (h *host) askUntilAnswered(t *testing.T, ip netip.Addr, start time.Time, bound time.Duration) time.Duration {
	t.Helper()
	err := inNS(t, nsPath(h.lan), func() error {
		ifi, err := net.InterfaceByName("lan0")
		if err != nil {
			return err
		}
		for time.Since(start) < bound {
			var answered bool
			if ip.Is4() {
				answered = arpAnswered(ifi, ip)
			} else {
				_, err = solicitWithin(ifi, ip, 100*time.Millisecond)
				answered = err == nil
			}
			if answered {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("asking for %s from the LAN: %v", ip, err)
	}
	return time.Since(start)
}

// arpAnswered asks for ip once and waits 100 ms for the answer.
func arpAnswered(ifi *net.Interface, ip netip.Addr) bool {
	c, err := arp.Dial(ifi)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = c.Resolve(ip)
	return err == nil
}

// An uplink taken down and up again loses its proxy entries of both
// families (the kernel flushes them on the way down), and with them every
// IP held as a route on it. The node process, subscribed to link events,
// puts them back as the uplink comes up, not at its next repair (60 s
// here, as in the DaemonSet), and counts them as proxy repairs. The time
// until the LAN is answered again is printed.
func TestTheNodeProcessPutsBackTheProxyEntriesAnUplinkBounceFlushedAtOnce(t *testing.T) {
	h := newHost(t)
	h.forwardIPv4()
	// A node's own address management (networkd, DHCP) puts its IPv6
	// address back after a bounce; this node has none, so it keeps it.
	h.inNode("sysctl -qw net.ipv6.conf.uplink0.keep_addr_on_down=1")
	ip4, ip6 := netip.MustParseAddr("192.0.2.71"), netip.MustParseAddr("2001:db8:1::71")
	h.run(attach("ADD", "c1", h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs(ip4.String(), ip6.String())}))).mustOK(t, "ADD")
	bin, err := nodeBin()
	if err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"type": "external-ip", "dataDir": h.dataDir, "allowedRanges": []string{subnet4, subnet6}}
	logs := h.startWatch(t, bin, entry, "--repair-every", repairPeriod.String(), "--metrics-address", metricsAddr)
	h.eventually(t, 20*time.Second, "the node process reading the held IPs", func() bool {
		m, err := h.scrape()
		return err == nil && strings.Contains(m, `external_ip_held{ip="`+ip4.String()+`"`)
	})

	h.inNode("ip link set uplink0 down")
	if r, p := h.routeState(ip4.String()); !r || p {
		t.Fatalf("uplink0 down: route %v, proxy entry %v; the test needs the kernel to have flushed the entry", r, p)
	}
	up := time.Now()
	h.inNode("ip link set uplink0 up")
	for _, ip := range []netip.Addr{ip4, ip6} {
		took := h.askUntilAnswered(t, ip, up, repairPeriod/2)
		t.Logf("the LAN's solicitation for %s answered %s after uplink0 came up (repair period %s)", ip, took.Round(time.Millisecond), repairPeriod)
		if took >= repairPeriod/2 {
			t.Errorf("%s unanswered for %s after uplink0 came up: the node process waits for its repair period", ip, took)
		}
	}
	m, err := h.scrape()
	if err != nil {
		t.Fatal(err)
	}
	if got := grepLines(m, "external_ip_repairs_total"); !strings.Contains(got, `external_ip_repairs_total{kind="proxy"} 2`) || strings.Contains(got, `kind="other"`) {
		t.Errorf("repairs counted:\n%s\nwant the two proxy entries as kind proxy, none as other", got)
	}
	if b, _ := os.ReadFile(logs); !strings.Contains(string(b), "an uplink came up again") {
		t.Errorf("the node process's log does not say why it repaired:\n%s", b)
	}
}

// A route of an IP held as a route, deleted by hand, is counted as what
// observe.md says it is: an address drift (the IP missing from the
// holder), not other.
func TestTheNodeProcessCountsARepairedRouteAsAnAddressDrift(t *testing.T) {
	h := newHost(t)
	h.forwardIPv4()
	ip4 := "192.0.2.72"
	h.run(attach("ADD", "c1", h.netConf("1.0.0", map[string]any{"hold": "route", "runtimeConfig": runtimeIPs(ip4)}))).mustOK(t, "ADD")
	bin, err := nodeBin()
	if err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"type": "external-ip", "dataDir": h.dataDir, "allowedRanges": []string{subnet4, subnet6}}
	h.startWatch(t, bin, entry, "--repair-every", "1s", "--metrics-address", metricsAddr)
	h.eventually(t, 20*time.Second, "the node process serving metrics", func() bool { _, err := h.scrape(); return err == nil })
	h.inNode("ip route del %s/32 dev eip0", ip4)
	h.eventually(t, 5*time.Second, "the route put back", func() bool { r, _ := h.routeState(ip4); return r })
	m, err := h.scrape()
	if err != nil {
		t.Fatal(err)
	}
	if got := grepLines(m, "external_ip_repairs_total"); !strings.Contains(got, `external_ip_repairs_total{kind="address"} 1`) || strings.Contains(got, `kind="other"`) {
		t.Errorf("repairs counted:\n%s\nwant the route as kind address, none as other", got)
	}
}
