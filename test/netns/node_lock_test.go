package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// routedUplink is an uplink of the node beside uplink0, whose external
// IPs need our routing: the default route of the node goes by uplink0.
type routedUplink struct{ name, peer, addr, gw, ip, ipNet string }

var racingUplinks = []routedUplink{
	{"uplink1", "lanr1", "198.51.100.1/24", "198.51.100.254", "198.51.100.10", "198.51.100.0/24"},
	{"uplink2", "lanr2", "203.0.113.1/24", "203.0.113.254", "203.0.113.10", "203.0.113.0/24"},
}

// addRoutedUplinks gives the node uplink0's default route and, for each
// of ups, an uplink to the LAN namespace with a default route of a higher
// metric through its gateway.
func (h *host) addRoutedUplinks(ups []routedUplink) {
	h.t.Helper()
	h.inNode("ip route add default via %s dev uplink0 metric 100", lanV4)
	for i, u := range ups {
		h.sh("ip -n %s link add %s type veth peer name %s netns %s", h.name, u.name, u.peer, h.lan)
		h.inNode("ip addr add %s dev %s", u.addr, u.name)
		h.sh("ip -n %s link set %s up", h.lan, u.peer)
		h.inNode("ip link set %s up", u.name)
		h.inNode("ip route add default via %s dev %s metric %d onlink", u.gw, u.name, 200+i)
	}
}

// stopped waits, within 10 s, until the process pid is stopped.
func stopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("the paused ADD exited before its pause: %v", err)
		}
		// pid (comm) state ...: the state follows the last ')'.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ADD did not pause at its step within 10 s")
		}
	}
}

// Two networks of two dataDirs ADD their first IPs, each on an uplink
// that nothing routes yet, at once: the first has made its slot's routes
// and is about to make its chain (paused there, faultinject) when the
// second comes. The node lock around the uplink marking and the policy
// routing makes the second wait, so each uplink gets a slot of its own:
// both ADDs return 0, each uplink's table routes by its own gateway, and
// CHECK and status of both pass. Without it the second took the same free
// slot, and one of the two failed or routed by the other's gateway.
func TestTwoDataDirsRoutingTheirFirstIPsOnTwoNewUplinksAtOnceTakeASlotEach(t *testing.T) {
	h := newHost(t)
	h.forwardIPv4()
	h.addRoutedUplinks(racingUplinks)
	var confs []map[string]any
	for i, u := range racingUplinks {
		conf := h.netConf("1.0.0", map[string]any{
			"traffic": "both", "device": fmt.Sprintf("eip%d", i+1), "dataDir": filepath.Join(t.TempDir(), "state"),
			"allowedRanges": []string{u.ipNet}, "runtimeConfig": runtimeIPs(u.ip),
		})
		conf["name"] = fmt.Sprintf("net-%d", i+1)
		// Two containers, two addresses: one address leaves by one uplink.
		conf["prevResult"] = prevResultGiving(t, "1.0.0", fmt.Sprintf("10.1.0.%d/24", 5+i), fmt.Sprintf("fd00:1::%d/64", 5+i))
		confs = append(confs, conf)
	}
	first := h.start(faultBinary(t), attach("ADD", "a", confs[0]), assigner.PauseEnv+"=uplink-routed")
	stopped(t, first.cmd.Process.Pid)
	second := h.start(pluginBin, attach("ADD", "b", confs[1]))
	done := make(chan result, 1)
	go func() { done <- second.wait() }()
	var r2 result
	waited := true
	select {
	case r2 = <-done:
		waited = false
	case <-time.After(time.Second):
	}
	first.cmd.Process.Signal(syscall.SIGCONT)
	r1 := first.wait()
	if waited {
		r2 = <-done
	}
	t.Logf("the second ADD waited for the first to leave the uplink routing: %v", waited)
	r1.mustOK(t, "the first ADD, paused with its slot's routes made")
	r2.mustOK(t, "the second ADD, on another uplink")
	tables := map[string]string{}
	for _, line := range lines(h.inNode("ip route show table all proto 225")) {
		for _, u := range racingUplinks {
			if strings.Contains(line, "via "+u.gw+" dev "+u.name+" ") {
				tables[u.name] = strings.Fields(line[strings.Index(line, " table "):])[1]
			}
		}
	}
	if len(tables) != 2 || tables["uplink1"] == tables["uplink2"] {
		t.Errorf("uplink tables %v, want one table of each uplink's own gateway:\n%s", tables, h.inNode("ip route show table all proto 225"))
	}
	for i, conf := range confs {
		id := []string{"a", "b"}[i]
		h.run(attach("CHECK", id, conf)).mustOK(t, "CHECK of "+id)
		if drift := h.driftIn(conf["dataDir"].(string)); len(drift) != 0 {
			t.Errorf("status of %s names drift %q", conf["dataDir"], drift)
		}
	}
}
