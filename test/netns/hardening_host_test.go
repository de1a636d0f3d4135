package netns

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The faults of the holder device and the uplinks, through the built
// binary: two dataDirs on one device, a lost state directory, a foreign
// device beside a creation marker, a vanished uplink.

// legacyAlias is how holders were marked before the alias named the
// dataDir.
const legacyAlias = "external-ip holder: managed by the external-ip CNI plugin"

// alias is the holder's alias in the node; the test fails if the device
// is missing, so that no check passes because the device is gone.
func (h *host) alias(device string) string {
	h.t.Helper()
	out, err := h.try("ip -n %s -d -o link show dev %s", h.name, device)
	if err != nil {
		h.t.Fatalf("device %s is missing: %v\n%s", device, err, out)
	}
	if _, rest, ok := strings.Cut(out, " alias "); ok {
		return strings.TrimSpace(strings.SplitN(rest, "\\", 2)[0])
	}
	return ""
}

// addrsOf lists device's addresses as "ip/prefix"; missing device fails.
func (h *host) addrsOf(device string) string {
	h.t.Helper()
	out, err := h.try("ip -n %s -o addr show dev %s", h.name, device)
	if err != nil {
		h.t.Fatalf("device %s is missing: %v\n%s", device, err, out)
	}
	var addrs []string
	for _, line := range lines(out) {
		if f := strings.Fields(line); len(f) >= 4 {
			addrs = append(addrs, f[3])
		}
	}
	return strings.Join(addrs, " ")
}

// proxies lists the node's proxy neighbour entries as "ip dev".
func (h *host) proxies() []string {
	h.t.Helper()
	var out []string
	for _, line := range lines(h.stdout("ip -n %s -6 neigh show proxy", h.name)) {
		if f := strings.Fields(line); len(f) >= 3 {
			out = append(out, f[0]+" "+f[2])
		}
	}
	return out
}

func (h *host) addOnDir(dataDir, network, id string, ips ...string) result {
	h.t.Helper()
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "dataDir": dataDir})
	conf["name"] = network
	return h.run(call{command: "ADD", containerID: id, ifName: "eth0", netns: "/var/run/netns/" + id, conf: conf})
}

func TestASecondDataDirOnTheSameDeviceIsRefusedNamingBothAndChangesNothing(t *testing.T) {
	h := newHost(t)
	h.addOn("net-a", "a", "192.0.2.10", "2001:db8:1::10")
	if got, want := h.alias("eip0"), "external-ip holder: state in "+h.dataDir; got != want {
		t.Fatalf("the holder's alias is %q, want %q (its owner)", got, want)
	}
	other := t.TempDir()
	before := h.view()
	h.addOnDir(other, "net-b", "b", "192.0.2.11").mustFail(t, "ADD from a second dataDir", 7, h.dataDir, other)
	gc := h.gcConf("net-b", nil, map[string]any{"dataDir": other})
	h.run(call{command: "GC", conf: gc}).mustOK(t, "GC of the second dataDir")
	h.run(call{command: "DEL", containerID: "b", ifName: "eth0", conf: gc}).mustOK(t, "DEL of the second dataDir")
	h.mustBeUnchanged(t, "the second dataDir's ADD, GC and DEL", before)
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Errorf("the refused dataDir %s got %d entries", other, len(entries))
	}
}

func TestAHolderMarkedTheOldWayIsReMarkedForItsDataDir(t *testing.T) {
	h := newHost(t)
	h.inNode("ip link add eip0 type bridge")
	h.inNode("ip link set eip0 alias '%s'", legacyAlias)
	h.addOn("net-a", "a", "192.0.2.10")
	if got, want := h.alias("eip0"), "external-ip holder: state in "+h.dataDir; got != want {
		t.Fatalf("after an ADD the old-format holder's alias is %q, want %q", got, want)
	}
	if !strings.Contains(h.addrsOf("eip0"), "192.0.2.10/32") {
		t.Fatal("the ADD on the re-marked holder did not put 192.0.2.10 on it")
	}
}

func TestWithTheStateDirectoryLostGCAndRepairReleaseTheHoldersAddressesAndProxies(t *testing.T) {
	for _, how := range []string{"GC", "repair"} {
		t.Run(how, func(t *testing.T) {
			h := newHost(t)
			h.addOn("net-a", "a", "192.0.2.10", "2001:db8:1::10")
			if !h.proxied("2001:db8:1::10", "uplink0") {
				t.Fatal("setup: no proxy entry for 2001:db8:1::10 on uplink0")
			}
			if err := os.RemoveAll(filepath.Join(h.dataDir, "eip0")); err != nil {
				t.Fatal(err)
			}
			if how == "GC" {
				h.run(call{command: "GC", conf: h.gcConf("net-a", []string{"a"}, nil)}).mustOK(t, "GC")
			} else {
				if out := h.inNode("%s repair --data-dir %s", pluginBin, h.dataDir); !strings.Contains(out, "eip0: repaired") {
					t.Fatalf("repair did not find the holder whose state was lost: %q", out)
				}
			}
			if got := h.addrsOf("eip0"); got != "" {
				t.Errorf("%s with no state left %q on eip0, which nothing holds", how, got)
			}
			if got := h.proxies(); len(got) != 0 {
				t.Errorf("%s with no state left the proxy entries %q", how, got)
			}
		})
	}
}

func TestAFailedCreationNeverLeadsToAdoptingAForeignBridge(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	h.runWith(withoutNetAdmin(t), attach("ADD", "a", conf)).mustFail(t, "ADD without CAP_NET_ADMIN", 100, "eip0")
	marker := filepath.Join(h.dataDir, "eip0", "creating-device")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the failed creation left its marker %s", marker)
	}
	// Another program makes a bridge of that name; a marker is there as an
	// older version's crash would have left it.
	h.inNode("ip link add eip0 type bridge")
	h.inNode("ip addr add 198.51.100.9/32 dev eip0")
	h.inNode("ip link set eip0 up")
	if err := os.WriteFile(marker, []byte(`"eip0"`), 0o600); err != nil {
		t.Fatal(err)
	}
	alias, addrs := h.alias("eip0"), h.addrsOf("eip0")

	h.run(call{command: "STATUS", conf: h.gcConf("testnet", nil, nil)}).mustFail(t, "STATUS beside a foreign eip0", 50, "eip0")
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("STATUS removed the marker: it must write nothing")
	}
	h.run(attach("ADD", "a", conf)).mustFail(t, "ADD beside a foreign eip0", 7, "eip0")
	h.run(call{command: "GC", conf: h.gcConf("testnet", nil, nil)}).mustFail(t, "GC beside a foreign eip0", 7, "eip0")
	if got := h.alias("eip0"); got != alias {
		t.Errorf("the foreign eip0's alias went from %q to %q", alias, got)
	}
	if got := h.addrsOf("eip0"); got != addrs {
		t.Errorf("the foreign eip0's addresses went from %q to %q", addrs, got)
	}
}

// addUplink gives the node another uplink, name, to a LAN-side peer, with
// 198.51.100.1/24 and 2001:db8:2::1/64, IPv6 forwarding on, and waits until
// it can send neighbour advertisements.
func (h *host) addUplink(name, peer string) {
	h.t.Helper()
	h.sh("ip -n %s link add %s type veth peer name %s netns %s", h.name, name, peer, h.lan)
	h.inNode("sysctl -qw net.ipv6.conf.%s.accept_dad=0 net.ipv6.conf.%s.forwarding=1", name, name)
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.%s.accept_dad=0", h.lan, peer)
	h.inNode("ip addr add 198.51.100.1/24 dev %s", name)
	h.inNode("ip addr add 2001:db8:2::1/64 dev %s nodad", name)
	h.sh("ip -n %s link set %s up", h.lan, peer)
	h.inNode("ip link set %s up", name)
	h.waitIPv6Ready(h.name, name)
}

// indexUplink is the uplink the IP's index names.
func (h *host) indexUplink(ip string) string {
	h.t.Helper()
	out := h.inNode("cat %s", filepath.Join(h.dataDir, "eip0", "ip", ip+".json"))
	_, rest, ok := strings.Cut(out, `"uplink":"`)
	if !ok {
		return ""
	}
	return strings.SplitN(rest, `"`, 2)[0]
}

func (h *host) uplinkConf(ips ...string) map[string]any {
	return h.netConf("1.1.0", map[string]any{
		"runtimeConfig": runtimeIPs(ips...),
		"allowedRanges": []string{"198.51.100.0/24", "2001:db8:2::/64"},
	})
}

func TestAHeldIPWhoseUplinkVanishedIsReChosenByTheNextAdd(t *testing.T) {
	h := newHost(t)
	h.addUplink("up0", "lanb0")
	conf := h.uplinkConf("198.51.100.10", "2001:db8:2::10")
	h.run(attach("ADD", "a", conf)).mustOK(t, "ADD a on up0")
	h.inNode("ip link del up0")
	h.addUplink("up1", "lanb1")
	frames := captureOn(t, h.lan, "lanb1")
	start := time.Now()
	h.run(attach("ADD", "b", conf)).mustOK(t, "ADD b of the IPs whose uplink vanished")
	for _, ip := range []string{"198.51.100.10", "2001:db8:2::10"} {
		if got := h.indexUplink(ip); got != "up1" {
			t.Errorf("%s's index names uplink %q, want up1", ip, got)
		}
	}
	if !h.proxied("2001:db8:2::10", "up1") {
		t.Error("no proxy entry for 2001:db8:2::10 on its new uplink up1")
	}
	got := collectWire(frames, 2*time.Second,
		wireWant{naFor(netip.MustParseAddr("2001:db8:2::10")), 1},
		wireWant{arpAbout(netip.MustParseAddr("198.51.100.10"), 0), 1})
	if len(got[0]) == 0 || len(got[1]) == 0 {
		t.Errorf("on up1 within %v: %d NA for 2001:db8:2::10 and %d ARP for 198.51.100.10, want both announced there", time.Since(start), len(got[0]), len(got[1]))
	}
	h.consistent("after the re-chosen ADD")
}

func TestAnAddOfAHeldIPWithNoUplinkLeftNamesTheIPAndItsSource(t *testing.T) {
	h := newHost(t)
	h.addUplink("up0", "lanb0")
	conf := h.uplinkConf("198.51.100.10")
	h.run(attach("ADD", "a", conf)).mustOK(t, "ADD a on up0")
	h.inNode("ip link del up0")
	h.run(attach("ADD", "b", conf)).mustFail(t, "ADD with no uplink left", 7, "runtimeConfig.externalIPs[0]", "198.51.100.10")
}

func TestGCNeverFailsBecauseAnUplinkVanishedAndReHomesWhatItCan(t *testing.T) {
	h := newHost(t)
	h.addUplink("up0", "lanb0")
	h.run(attach("ADD", "a", h.uplinkConf("198.51.100.10", "2001:db8:2::10"))).mustOK(t, "ADD a on up0")
	h.inNode("ip link del up0")
	out := h.inNode("%s status --data-dir %s", pluginBin, h.dataDir)
	if !strings.Contains(out, "198.51.100.10: its uplink up0 is gone") {
		t.Errorf("status does not report the vanished uplink of 198.51.100.10:\n%s", out)
	}
	gc := call{command: "GC", conf: h.gcConf("testnet", []string{"a"}, nil)}
	h.run(gc).mustOK(t, "GC with the uplink gone and no other")
	h.addUplink("up1", "lanb1")
	h.run(gc).mustOK(t, "GC once another uplink has the route")
	for _, ip := range []string{"198.51.100.10", "2001:db8:2::10"} {
		if got := h.indexUplink(ip); got != "up1" {
			t.Errorf("after GC %s's index names uplink %q, want up1", ip, got)
		}
	}
	if !h.proxied("2001:db8:2::10", "up1") {
		t.Error("GC gave 2001:db8:2::10 no proxy entry on its new uplink up1")
	}
	h.consistent("after GC")
}

// netlinkCalls runs one call of the plugin under strace and counts its
// netlink sockets and its requests by type. The call's IPs must be IPv6,
// so that no detached announcer (whose calls strace -f would add) starts.
func (h *host) netlinkCalls(c call) (sockets int, requests map[string]int) {
	h.t.Helper()
	trace := filepath.Join(h.t.TempDir(), "trace")
	wrapper := filepath.Join(h.t.TempDir(), "external-ip-strace")
	script := "#!/bin/sh\nexec strace -f -qq -e trace=socket,sendto,sendmsg -o " + trace + " " + pluginBin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		h.t.Fatal(err)
	}
	h.runWith(wrapper, c).mustOK(h.t, c.command+" under strace")
	b, err := os.ReadFile(trace)
	if err != nil {
		h.t.Fatalf("reading the strace output: %v", err)
	}
	requests = map[string]int{}
	for _, line := range lines(string(b)) {
		if strings.Contains(line, "socket(AF_NETLINK") {
			sockets++
		}
		if _, rest, ok := strings.Cut(line, "nlmsg_type="); ok {
			requests[strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == '}' })[0]]++
		}
	}
	return sockets, requests
}

// An ADD on a holder that exists asks for each link once: the holder, its
// ports if it is a bridge (a filtered dump, which the netlink library
// cannot send), the uplink. Before, it asked 6 times on 3 sockets. An IP's
// first proxy entry is looked for before it is made (another program's is
// kept at DEL), one RTM_GETNEIGH, which the library cannot send either: a
// listing of the uplink's proxy entries would grow with the IPs held. What
// the library cannot send goes on one socket of package host's own, so an
// ADD opens two: the library's and that one.
func TestAnAddOnAnExistingHolderAsksForEachLinkOnce(t *testing.T) {
	h := newHost(t)
	h.addOn("testnet", "a", "2001:db8:1::10")
	bridge := 0
	if strings.Contains(h.inNode("ip -d -o link show dev eip0"), " bridge ") {
		bridge = 1
	}
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs("2001:db8:1::11")})
	sockets, requests := h.netlinkCalls(attach("ADD", "b", conf))
	if sockets > 2 || requests["RTM_GETLINK"] > 2+bridge {
		t.Errorf("the ADD opened %d netlink sockets and sent %v, want at most 2 sockets and %d RTM_GETLINK", sockets, requests, 2+bridge)
	}
	if requests["RTM_NEWADDR"] != 1 || requests["RTM_NEWNEIGH"] != 1 || requests["RTM_GETNEIGH"] != 1 {
		t.Errorf("the ADD sent %v, want one RTM_NEWADDR, one RTM_GETNEIGH and one RTM_NEWNEIGH: the count missed its requests", requests)
	}
	t.Logf("netlink per IPv6 ADD on an existing holder: %d sockets, %v", sockets, requests)
}
