package netns

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/ndp"
)

// nodeBin is the node build (build tag metrics), made once for the tests
// that need it.
var nodeBin = sync.OnceValues(func() (string, error) {
	out := filepath.Join(filepath.Dir(pluginBin), "external-ip-node")
	build := exec.Command("go", "build", "-tags", "metrics", "-o", out, "../../plugins/external-ip")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the node binary: %v\n%s", err, b)
	}
	return out, nil
})

// metricsAddr is where the node process serves, inside the node namespace.
const metricsAddr = "127.0.0.1:9477"

// startNodeProcess runs `external-ip-node install --watch --metrics-address`
// in the node namespace, on CNI dirs of its own, until the test ends.
// It returns the file the process logs to.
func (h *host) startNodeProcess(t *testing.T) string {
	t.Helper()
	bin, err := nodeBin()
	if err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"type": "external-ip", "dataDir": h.dataDir, "allowedRanges": []string{subnet4}}
	logs := h.startWatch(t, bin, entry, "--metrics-address", metricsAddr)
	h.eventually(t, 20*time.Second, "the node process serving metrics", func() bool {
		_, err := h.scrape()
		return err == nil
	})
	return logs
}

// startWatch runs `BIN install --watch` with the plugin entry given and
// more flags, in the node namespace, on CNI dirs of its own, until the
// test ends. It returns the file the process logs to.
func (h *host) startWatch(t *testing.T, bin string, entry map[string]any, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	binDir, confDir, entryFile := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d"), filepath.Join(dir, "entry.json")
	os.Mkdir(binDir, 0o755)
	os.Mkdir(confDir, 0o755)
	os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`), 0o644)
	b, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(entryFile, b, 0o644)
	logs := filepath.Join(dir, "node.log")
	logFile, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own copy
	args := append([]string{"netns", "exec", h.name, bin, "install", "--watch", "--plugin-config", entryFile,
		"--bin-dir", binDir, "--conf-dir", confDir, "--plugin-binary", pluginBin}, flags...)
	cmd := exec.Command("ip", args...)
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	return logs
}

// scrape GETs /metrics from inside the node namespace.
func (h *host) scrape() (string, error) {
	node, err := ns.GetNS("/var/run/netns/" + h.name)
	if err != nil {
		return "", err
	}
	defer node.Close()
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = node.Do(func(ns.NetNS) error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

func (h *host) eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
	}
}

// A host on the LAN that takes one of our held IPs is seen as it uses it.
// The node process logs the episode with both MACs, sets the conflict
// series, counts it, and defends.
func TestARogueHostClaimingAHeldIPShowsInTheMetricsAndTheLog(t *testing.T) {
	for _, tc := range []struct {
		family, ip string
		claim      func(h *host, ip string)
	}{
		// It talks from the IP: its ARP request for the node says "sender
		// IP is at my MAC".
		{"IPv4", "192.0.2.50", func(h *host, ip string) {
			h.sh("ip -n %s addr add %s/24 dev lan0", h.lan, ip)
			h.try("ip netns exec %s ping -c 3 -i 0.3 -W 1 -I %s %s", h.lan, ip, nodeV4)
		}},
		// It announces the IP as its own: an unsolicited neighbour
		// advertisement to all nodes (what Linux sends after DAD with
		// ndisc_notify on, but the node's proxy entry would fail that DAD).
		{"IPv6", "2001:db8:1::50", func(h *host, ip string) { h.advertise(t, ip) }},
	} {
		t.Run(tc.family, func(t *testing.T) { testRogueHost(t, tc.ip, tc.claim) })
	}
}

// advertise sends, from lan0 in the LAN namespace, an unsolicited NA
// claiming ip with lan0's MAC.
func (h *host) advertise(t *testing.T, ip string) {
	t.Helper()
	lan, err := ns.GetNS("/var/run/netns/" + h.lan)
	if err != nil {
		t.Fatal(err)
	}
	defer lan.Close()
	err = lan.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("lan0")
		if err != nil {
			return err
		}
		c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
		if err != nil {
			return err
		}
		defer c.Close()
		na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: netip.MustParseAddr(ip),
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifi.HardwareAddr}}}
		return c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes())
	})
	if err != nil {
		t.Fatalf("advertising %s from the LAN: %v", ip, err)
	}
}

func testRogueHost(t *testing.T, ip string, claim func(h *host, ip string)) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip)})
	h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "ADD")
	logs := h.startNodeProcess(t)
	h.eventually(t, 20*time.Second, "the held series", func() bool {
		m, _ := h.scrape()
		return strings.Contains(m, `external_ip_held{ip="`+ip+`",uplink="uplink0"} 1`)
	})
	if m, _ := h.scrape(); strings.Contains(m, "external_ip_conflict{") {
		t.Fatalf("a conflict before any rogue host:\n%s", m)
	}
	rogueMAC := strings.TrimSpace(h.sh("ip netns exec %s cat /sys/class/net/lan0/address", h.lan))
	nodeMAC := strings.TrimSpace(h.inNode("cat /sys/class/net/uplink0/address"))
	claim(h, ip)
	// The defence round follows the episode's start: both are waited for.
	want := []string{fmt.Sprintf(`external_ip_conflict{ip="%s",mac="%s"} 1`, ip, rogueMAC),
		"external_ip_conflicts_total 1", `external_ip_announcements_total{reason="defend"} 1`}
	var m string
	seen := func() bool {
		m, _ = h.scrape()
		for _, w := range want {
			if !strings.Contains(m, w) {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !seen(); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			logged, _ := os.ReadFile(logs)
			t.Fatalf("want %q within 20 s; the metrics:\n%s\nthe log:\n%s", want, grepLines(m, "external_ip_"), logged)
		}
	}
	var episode []string
	logged, _ := os.ReadFile(logs)
	for _, l := range lines(string(logged)) {
		if strings.Contains(l, "claims a held IP") {
			episode = append(episode, l)
		}
	}
	if len(episode) != 1 || !strings.Contains(episode[0], rogueMAC) || !strings.Contains(episode[0], nodeMAC) || !strings.Contains(episode[0], ip) {
		t.Errorf("the log of the episode: %q; want one line naming %s, the rogue's MAC %s and ours %s\n%s", episode, ip, rogueMAC, nodeMAC, logged)
	}
}

// The plugin's calls after the node process started are counted by verb
// and code, successes and failures alike.
func TestThePluginsCallsAreCountedByVerbAndCode(t *testing.T) {
	h := newHost(t)
	h.startNodeProcess(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.51")})
	h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "ADD")
	h.run(call{command: "CHECK", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "CHECK")
	h.run(call{command: "CHECK", containerID: "nobody", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustFail(t, "CHECK of no attachment", 104)
	bad := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("198.51.100.9")})
	h.run(call{command: "ADD", containerID: "c2", ifName: "eth0", netns: "/var/run/netns/c2", conf: bad}).mustFail(t, "ADD outside allowedRanges", 7)
	m, err := h.scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`external_ip_cni_requests_total{code="0",verb="ADD"} 1`,
		`external_ip_cni_requests_total{code="7",verb="ADD"} 1`,
		`external_ip_cni_requests_total{code="0",verb="CHECK"} 1`,
		`external_ip_cni_requests_total{code="104",verb="CHECK"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(m, "external_ip_cni"))
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range lines(s) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
