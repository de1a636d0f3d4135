package netns

import (
	"testing"
)

func TestCheckPassesAfterAddFailsOnAnIPRemovedByHandAndPassesAfterReAdd(t *testing.T) {
	for _, v := range checkVersions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK right after ADD")

			h.inNode("ip addr del %s/32 dev eip0", sharedIP)
			before := h.settledView()
			h.run(attach("CHECK", "c1", conf)).mustFail(t, "CHECK after the IP was removed by hand", codeDrift,
				sharedIP, "eip0")
			h.mustBeUnchanged(t, "a failing CHECK", before)

			h.run(attach("ADD", "c1", conf)).mustOK(t, "re-ADD c1")
			h.mustHold(t, "re-ADD after the IP was removed by hand", "eip0", sharedIP+"/32")
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK after re-ADD repaired the IP")
		})
	}
}

func TestCheckFailsWhenTheHolderIsDown(t *testing.T) {
	for _, v := range checkVersions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.inNode("ip link set eip0 down")
			before := h.settledView()
			h.run(attach("CHECK", "c1", conf)).mustFail(t, "CHECK with eip0 down", codeDrift, "eip0", "down")
			h.mustBeUnchanged(t, "CHECK with eip0 down", before)

			h.run(attach("ADD", "c1", conf)).mustOK(t, "re-ADD c1")
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK after re-ADD set eip0 up")
		})
	}
}

func TestCheckFailsWhenTheHolderIsDeleted(t *testing.T) {
	for _, v := range checkVersions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.inNode("ip link del eip0")
			before := h.settledView()
			h.run(attach("CHECK", "c1", conf)).mustFail(t, "CHECK with eip0 deleted", codeDrift, "eip0", "missing")
			h.mustBeUnchanged(t, "CHECK with eip0 deleted (re-created it?)", before)

			h.run(attach("ADD", "c1", conf)).mustOK(t, "re-ADD c1")
			h.mustHold(t, "re-ADD after eip0 was deleted", "eip0", sharedIP+"/32")
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK after re-ADD re-created eip0")
		})
	}
}

func TestCheckFailsWhenAnIPv6IPLostItsProxyEntry(t *testing.T) {
	const ip6 = "2001:db8:1::10"
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip6)})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK right after ADD")
	h.inNode("ip -6 neigh del proxy %s dev uplink0", ip6)
	before := h.settledView()
	h.run(attach("CHECK", "c1", conf)).mustFail(t, "CHECK after the proxy entry was removed by hand", codeDrift,
		ip6, "proxy", "uplink0")
	h.mustBeUnchanged(t, "a failing CHECK", before)

	h.run(attach("ADD", "c1", conf)).mustOK(t, "re-ADD c1")
	if !h.proxied(ip6, "uplink0") {
		t.Fatalf("re-ADD did not restore the proxy entry for %s on uplink0", ip6)
	}
	h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK after re-ADD restored the proxy entry")
}

func TestCheckFailsForAnAttachmentNeverAdded(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
	before := h.settledView()
	h.run(attach("CHECK", "c9", conf)).mustFail(t, "CHECK of an attachment never added", codeDrift, "c9")
	h.mustBeUnchanged(t, "CHECK of an attachment never added", before)

	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	h.run(attach("CHECK", "c9", conf)).mustFail(t, "CHECK of c9 while only c1 is recorded", codeDrift, "c9")
}

// The plugin's own codes (plugins/external-ip/errors.go, listed in the README).
const (
	codeUnreachable = 102
	codeDrift       = 104
)
