package netns

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refusal is one request the plugin must refuse before changing anything.
type refusal struct {
	name    string
	extra   map[string]any
	cniArgs string
	setup   func(h *host)        // prepares the node, before the host is viewed
	edit    func(map[string]any) // edits the built config
	code    uint
	parts   []string // the message names the source and the value
}

func staticList(ips ...string) map[string]any { return map[string]any{"externalIPs": ips} }

func runtimeList(ips ...string) map[string]any {
	return map[string]any{"runtimeConfig": runtimeIPs(ips...)}
}

func multusList(ips ...string) map[string]any {
	return map[string]any{"args": map[string]any{"cni": map[string]any{"externalIPs": ips}}}
}

var refusals = []refusal{
	{name: "not an IP", extra: runtimeList("192.0.2.300"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"192.0.2.300"`, "not an IP address"}},
	{name: "a host name after a good IP", extra: map[string]any{"runtimeConfig": annotations("external-ip/addresses", "192.0.2.20,example.com")}, code: 7,
		parts: []string{"pod annotation external-ip/addresses[1]", `"example.com"`, "not an IP address"}},
	{name: "loopback IPv4 in the static list", extra: staticList("127.0.0.1"), code: 7,
		parts: []string{"externalIPs[0]", `"127.0.0.1"`, "loopback"}},
	{name: "loopback IPv6", extra: multusList("::1"), code: 7,
		parts: []string{"args.cni.externalIPs[0]", `"::1"`, "loopback"}},
	{name: "multicast IPv4", extra: runtimeList("224.0.0.251"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"224.0.0.251"`, "multicast"}},
	{name: "multicast IPv6 in CNI_ARGS", cniArgs: "IgnoreUnknown=1;EXTERNAL_IPS=ff02::1", code: 7,
		parts: []string{"CNI_ARGS EXTERNAL_IPS[0]", `"ff02::1"`, "multicast"}},
	{name: "unspecified IPv4", extra: staticList("0.0.0.0"), code: 7,
		parts: []string{"externalIPs[0]", `"0.0.0.0"`, "unspecified"}},
	{name: "unspecified IPv6", extra: map[string]any{"runtimeConfig": annotations("external-ip/addresses", "::")}, code: 7,
		parts: []string{"pod annotation external-ip/addresses[0]", `"::"`, "unspecified"}},
	{name: "link-local IPv4", extra: staticList("169.254.1.1"), code: 7,
		parts: []string{"externalIPs[0]", `"169.254.1.1"`, "link-local"}},
	{name: "link-local IPv6", extra: runtimeList("fe80::1"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"fe80::1"`, "link-local"}},
	{name: "IPv4-mapped IPv6 of an allowed IPv4", extra: runtimeList("::ffff:192.0.2.4"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"::ffff:192.0.2.4"`, "IPv4-mapped"}},
	{name: "limited broadcast", extra: staticList("255.255.255.255"), code: 7,
		parts: []string{"externalIPs[0]", `"255.255.255.255"`, "broadcast"}},
	{name: "outside allowedRanges", extra: runtimeList("198.51.100.7"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"198.51.100.7"`, "outside allowedRanges"}},
	{name: "outside allowedRanges in CNI_ARGS", cniArgs: "K8S_POD_NAME=p;EXTERNAL_IPS=192.0.2.20,203.0.113.9", code: 7,
		parts: []string{"CNI_ARGS EXTERNAL_IPS[1]", `"203.0.113.9"`, "outside allowedRanges"}},
	{name: "a runtime source with allowedRanges empty (secure default)",
		extra: map[string]any{"allowedRanges": []string{}, "runtimeConfig": runtimeIPs("192.0.2.20")}, code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", `"192.0.2.20"`, "allowedRanges is empty"}},
	{name: "a runtime source with allowedRanges absent (secure default)",
		extra: multusList("192.0.2.20"), edit: func(c map[string]any) { delete(c, "allowedRanges") }, code: 7,
		parts: []string{"args.cni.externalIPs[0]", `"192.0.2.20"`, "allowedRanges is empty"}},
	{name: "the node's own IPv4 on the uplink", extra: runtimeList(nodeV4), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", nodeV4, "uplink0"}},
	{name: "the node's own IPv6 on the uplink", extra: staticList(nodeV6), code: 7,
		parts: []string{"externalIPs[0]", nodeV6, "uplink0"}},
	{name: "an address of another interface, after a good IP", extra: runtimeList("192.0.2.20", "192.0.2.77"),
		setup: func(h *host) {
			h.inNode("ip link add other0 type veth peer name other1")
			h.inNode("ip addr add 192.0.2.77/32 dev other0")
			h.inNode("ip link set other0 up")
			h.inNode("ip link set other1 up")
		}, code: 7,
		parts: []string{"runtimeConfig.externalIPs[1]", "192.0.2.77", "other0"}},
	{name: "an IPv6 address of an interface that is down", extra: multusList("2001:db8:1::77"),
		setup: func(h *host) {
			h.inNode("ip link add other0 type veth peer name other1")
			h.inNode("ip addr add 2001:db8:1::77/128 dev other0")
		}, code: 7,
		parts: []string{"args.cni.externalIPs[0]", "2001:db8:1::77", "other0"}},
	{name: "the container's own IPv4 (prevResult), after a good IP", extra: runtimeList("192.0.2.20", "10.1.0.5"),
		// An uplink named, so that without the refusal the ADD would take it.
		edit: func(c map[string]any) {
			c["allowedRanges"] = []string{subnet4, subnet6, "10.1.0.0/24"}
			c["uplink"] = "uplink0"
		}, code: 7,
		parts: []string{"runtimeConfig.externalIPs[1]", `"10.1.0.5"`, "container's own address"}},
	{name: "the container's own IPv6 (prevResult) in the static list", extra: staticList("fd00:1::5"),
		edit: func(c map[string]any) { c["uplink"] = "uplink0" }, code: 7,
		parts: []string{"externalIPs[0]", `"fd00:1::5"`, "container's own address"}},
	{name: "the uplink subnet's network address", extra: staticList("192.0.2.0"), code: 7,
		parts: []string{"externalIPs[0]", "192.0.2.0", "network", subnet4}},
	{name: "the uplink subnet's broadcast address", extra: runtimeList("192.0.2.255"), code: 7,
		parts: []string{"runtimeConfig.externalIPs[0]", "192.0.2.255", "broadcast", subnet4}},
	{name: "the uplink IPv6 subnet's router anycast address", extra: staticList("2001:db8:1::"), code: 7,
		parts: []string{"externalIPs[0]", "2001:db8:1::", "network", subnet6}},
	{name: "malformed CNI_ARGS", extra: runtimeList("192.0.2.20"), cniArgs: "IgnoreUnknown=1;garbage", code: 4,
		parts: []string{"CNI_ARGS", `"garbage"`}},
	{name: "undecodable runtimeConfig.externalIPs", extra: map[string]any{"runtimeConfig": map[string]any{"externalIPs": map[string]any{"ip": "192.0.2.20"}}},
		code: 6, parts: []string{"runtimeConfig.externalIPs", `{"ip":"192.0.2.20"}`}},
	{name: "undecodable lockTimeout", extra: map[string]any{"runtimeConfig": runtimeIPs("192.0.2.20"), "lockTimeout": 5},
		code: 6, parts: []string{"lockTimeout", "5"}},
	{name: "ADD without prevResult", extra: runtimeList("192.0.2.20"), edit: func(c map[string]any) { delete(c, "prevResult") },
		code: 7, parts: []string{"prevResult", "missing"}},
}

func TestRefusedRequestsNameSourceAndValueAndChangeNothing(t *testing.T) {
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			if tt.setup != nil {
				tt.setup(h)
			}
			conf := h.netConf("1.0.0", tt.extra)
			if tt.edit != nil {
				tt.edit(conf)
			}
			add := attach("ADD", "c1", conf)
			add.cniArgs = tt.cniArgs

			before := h.settledView()
			h.run(add).mustFail(t, "ADD on a fresh node", tt.code, tt.parts...)
			h.mustBeUnchanged(t, "the refused ADD on a fresh node", before)

			// Again with another attachment holding an IP on eip0: neither its
			// records nor its addresses may move.
			bystander := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.50", "2001:db8:1::50")})
			h.run(attach("ADD", "c0", bystander)).mustOK(t, "ADD of bystander c0")
			before = h.view()
			h.run(add).mustFail(t, "ADD next to a bystander", tt.code, tt.parts...)
			h.mustBeUnchanged(t, "the refused ADD next to a bystander", before)
		})
	}
}

func TestHolderDeviceThatIsNotOursIsRefusedAndKeepsItsAddresses(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"device": "uplink0", "runtimeConfig": runtimeIPs(sharedIP, "2001:db8:1::10")})
	before := h.settledView()
	h.run(attach("ADD", "c1", conf)).mustFail(t, `ADD with "device": "uplink0"`, 7, "uplink0")
	h.mustBeUnchanged(t, `the refused ADD with "device": "uplink0"`, before)
	h.run(attach("DEL", "c1", conf)).mustOK(t, `DEL with "device": "uplink0"`)
	h.mustBeUnchanged(t, `DEL with "device": "uplink0"`, before)
}

func TestInvalidDeviceNamesAreRefusedNamingTheField(t *testing.T) {
	h := newHost(t)
	before := h.settledView()
	for _, name := range []string{"eip0-far-too-long", "eip/0", ".."} {
		conf := h.netConf("1.0.0", map[string]any{"device": name, "runtimeConfig": runtimeIPs(sharedIP)})
		h.run(attach("ADD", "c1", conf)).mustFail(t, "ADD with device "+name, 7, "device", name)
		h.run(attach("DEL", "c1", conf)).mustFail(t, "DEL with device "+name, 7, "device", name)
	}
	h.mustBeUnchanged(t, "ADD and DEL with invalid device names", before)
}

func TestSysctlsThatHideTheIPFromTheLANFailAddNamingTheSysctl(t *testing.T) {
	tests := []struct {
		name   string
		sysctl string
		ip     string
		names  string
	}{
		{"arp_ignore on all", "net.ipv4.conf.all.arp_ignore=1", sharedIP, "net.ipv4.conf.all.arp_ignore"},
		{"arp_ignore on the uplink", "net.ipv4.conf.uplink0.arp_ignore=2", sharedIP, "net.ipv4.conf.uplink0.arp_ignore"},
		{"IPv6 forwarding off on the uplink", "net.ipv6.conf.uplink0.forwarding=0", "2001:db8:1::10", "net.ipv6.conf.uplink0.forwarding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			h.inNode("sysctl -qw %s", tt.sysctl)
			conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(tt.ip)})
			before := h.settledView()
			h.run(attach("ADD", "c1", conf)).mustFail(t, "ADD with "+tt.sysctl, codeUnreachable,
				"runtimeConfig.externalIPs[0]", tt.ip, tt.names)
			h.mustBeUnchanged(t, "ADD refused for "+tt.sysctl, before)
		})
	}
}

func TestAddThatCannotGetTheLockFailsWithTryAgainLater(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP), "lockTimeout": "200ms"})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")

	lockPath := filepath.Join(h.dataDir, "eip0", "lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening the lock file the first ADD made: %v", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("taking %s: %v", lockPath, err)
	}

	conf2 := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.11"), "lockTimeout": "200ms"})
	before := h.settledView()
	start := time.Now()
	h.run(attach("ADD", "c2", conf2)).mustFail(t, "ADD while another holds the lock", 11, lockPath)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("ADD gave up on the lock after %v; lockTimeout was 200ms", took)
	}
	h.run(attach("DEL", "c1", conf)).mustFail(t, "DEL while another holds the lock", 11, lockPath)
	h.mustBeUnchanged(t, "ADD and DEL that could not get the lock", before)

	f.Close()
	h.run(attach("ADD", "c2", conf2)).mustOK(t, "ADD c2 once the lock was free")
	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL c1 once the lock was free")
	h.mustHold(t, "after the lock was released", "eip0", "192.0.2.11/32")
}
