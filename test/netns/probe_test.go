package netns

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// codeConflict is the plugin's error code for an IP another host answers for.
const codeConflict = 103

// conflicted are the addresses the LAN host already uses in the probe tests,
// one per family.
var conflicted = []string{"192.0.2.50", "2001:db8:1::50"}

// lanTakes puts ip on the LAN host's lan0, as another host already using it.
func (h *host) lanTakes(ip string) {
	h.t.Helper()
	if strings.Contains(ip, ":") {
		h.sh("ip -n %s addr add %s/64 dev lan0 nodad", h.lan, ip)
		return
	}
	h.sh("ip -n %s addr add %s/24 dev lan0", h.lan, ip)
}

// linkMAC reads dev's hardware address in namespace netns.
func (h *host) linkMAC(netns, dev string) string {
	h.t.Helper()
	f := strings.Fields(h.sh("ip -n %s -o link show dev %s", netns, dev))
	for i := range f[:len(f)-1] {
		if f[i] == "link/ether" {
			return f[i+1]
		}
	}
	h.t.Fatalf("%s in %s has no Ethernet address: %s", dev, netns, f)
	return ""
}

// timedRun runs c and says how long the binary took.
func (h *host) timedRun(c call) (result, time.Duration) {
	h.t.Helper()
	start := time.Now()
	r := h.run(c)
	return r, time.Since(start)
}

// holdsNoState fails unless dataDir holds nothing but directories and empty
// lock files: a refused ADD may create the state directory and its lock
// (which stays, as flock files do; the sink's too), never a record or a
// journal.
func (h *host) holdsNoState(t *testing.T, when string) {
	t.Helper()
	var files []string
	filepath.WalkDir(h.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil && (d.Name() == "lock" || d.Name() == "sink.lock") && info.Size() == 0 {
			return nil
		}
		files = append(files, path)
		return nil
	})
	if len(files) > 0 {
		t.Fatalf("%s left state under dataDir: %v", when, files)
	}
}

func TestConflictProbeRefusesAnIPAnotherLANHostHoldsAndChangesNothing(t *testing.T) {
	for _, ip := range conflicted {
		t.Run(ip, func(t *testing.T) {
			h := newHost(t)
			h.waitLAN()
			h.lanTakes(ip)
			lanMAC := h.linkMAC(h.lan, "lan0")
			before := h.settledView()
			conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip), "conflictProbe": "200ms"})
			h.run(attach("ADD", "c1", conf)).mustFail(t, "ADD of an IP the LAN host holds", codeConflict,
				ip, lanMAC, "uplink0", "runtimeConfig")

			if h.deviceExists("eip0") {
				t.Errorf("the refused ADD created eip0")
			}
			after := h.view()
			for _, p := range []struct{ name, was, now string }{
				{"addresses", before.addrs, after.addrs},
				{"links", before.links, after.links},
				{"proxy neighbours", before.proxies, after.proxies},
			} {
				if d := lineDiff(lines(p.was), lines(p.now)); d != "" {
					t.Errorf("the refused ADD changed the node's %s (-before +after):\n%s", p.name, d)
				}
			}
			h.holdsNoState(t, "the refused ADD")
		})
	}
}

func TestConflictProbeOffTakesAnIPAnotherLANHostHolds(t *testing.T) {
	h := newHost(t)
	h.waitLAN()
	for _, ip := range conflicted {
		h.lanTakes(ip)
	}
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(conflicted...), "conflictProbe": "0s"})
	h.run(attach("ADD", "c1", conf)).mustOK(t, `ADD with conflictProbe "0s"`)
	h.mustHold(t, "ADD with probing off", "eip0", conflicted[0]+"/32", conflicted[1]+"/128")
}

func TestAddProbesAndTakesAnIPNobodyAnswersFor(t *testing.T) {
	const wait = 200 * time.Millisecond
	ips := []string{"192.0.2.51", "2001:db8:1::51"}
	h := newHost(t)
	h.waitLAN()
	// The LAN host answers for its own addresses, just not for these.
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "conflictProbe": wait.String()})
	r, took := h.timedRun(attach("ADD", "c1", conf))
	r.mustOK(t, "ADD of IPs nobody holds, probing on")
	h.mustHold(t, "ADD with probing on", "eip0", ips[0]+"/32", ips[1]+"/128")
	// The probes of all new IPs wait out one window together: less means
	// no probe went out, twice as much means they ran one after another.
	if took < wait {
		t.Errorf("ADD of %d new IPs with conflictProbe %s took %s: it did not probe", len(ips), wait, took)
	}
	if took >= time.Duration(len(ips))*wait {
		t.Errorf("ADD of %d new IPs with conflictProbe %s took %s: the probes ran one after another", len(ips), wait, took)
	}
}

func TestSecondHolderOfAnIPDoesNotProbe(t *testing.T) {
	ips := []string{"192.0.2.52", "2001:db8:1::52"}
	h := newHost(t)
	h.waitLAN()
	first := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "conflictProbe": "0s"})
	h.run(attach("ADD", "c1", first)).mustOK(t, "ADD of the first holder")
	second := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "conflictProbe": "2s"})
	r, took := h.timedRun(attach("ADD", "c2", second))
	r.mustOK(t, "ADD of the second holder")
	if took > time.Second {
		t.Errorf("ADD of a second holder of %v took %s with conflictProbe 2s: it probed IPs the node already holds", ips, took)
	}
}

// TestProbeSocketsCloseInADetachedChild checks that a probed ADD leaves the
// last close of its probe sockets, which waits for an RCU grace period, to
// the detached child that sends the later rounds: for IPv4 with the ARP
// socket of the first round, for IPv6 alone (the ICMPv6 socket closes fast).
// A child started only to hold them exits as soon as the plugin has closed
// its copies, too soon to be seen here: pkg/announce's Session tests cover it.
func TestProbeSocketsCloseInADetachedChild(t *testing.T) {
	for _, tc := range []struct {
		ip      string
		sockets int // AF_PACKET sockets the child holds
	}{
		{"192.0.2.53", 2}, // the probe's and the first round's
		{"2001:db8:1::53", 1},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			h := newHost(t)
			h.waitLAN()
			conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(tc.ip),
				"conflictProbe": "50ms", "announce": map[string]any{"count": 2, "interval": "5s"}})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "probed ADD")
			procs := pluginProcs(t, h.name)
			if len(procs) != 1 {
				t.Fatalf("right after a probed ADD of %s, %d detached children (%v), want 1", tc.ip, len(procs), procs)
			}
			if got := packetSockets(t, procs[0]); got != tc.sockets {
				t.Errorf("the detached child holds %d AF_PACKET sockets, want %d", got, tc.sockets)
			}
		})
	}
}

// packetSockets counts the AF_PACKET sockets among pid's open files.
func packetSockets(t *testing.T, pid string) int {
	t.Helper()
	table, err := os.ReadFile("/proc/" + pid + "/net/packet")
	if err != nil {
		t.Fatalf("reading the packet sockets of %s: %v", pid, err)
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			inodes[f[len(f)-1]] = true
		}
	}
	fds, _ := filepath.Glob("/proc/" + pid + "/fd/*")
	n := 0
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			n++
		}
	}
	return n
}
