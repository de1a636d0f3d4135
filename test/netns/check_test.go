package netns

import (
	"maps"
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

// CHECK consults prevResult, as the CNI spec says it must: the record's
// steering goes to the container addresses the ADD's prevResult gave, and
// CHECK's prevResult (the chain's final result) must still give them.
func TestCheckFailsWhenPrevResultNoLongerGivesTheContainerAddressItsIPIsSteeredTo(t *testing.T) {
	for _, tc := range []struct {
		traffic string
		parts   []string // what the failing CHECK names
	}{
		{"both", []string{sharedIP, "steered to 10.1.0.5", "prevResult", "10.1.0.99"}},
		{"egress", []string{sharedIP, "10.1.0.5", "prevResult", "10.1.0.99"}},
	} {
		t.Run(tc.traffic, func(t *testing.T) {
			h := newHost(t)
			conf := h.steeredConfIn("1.0.0", "10.1.0.5/24", "fd00:1::5/64", sharedIP)
			conf["traffic"] = tc.traffic
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK with the ADD's prevResult")

			// A later plugin of the chain may add an address: the one the
			// rules use is still the container's.
			more := h.steeredConfIn("1.0.0", "10.1.0.5/24", "fd00:1::5/64", sharedIP)
			more["traffic"] = tc.traffic
			pr := more["prevResult"].(map[string]any)
			pr["ips"] = append(pr["ips"].([]any), map[string]any{"interface": 0, "address": "10.1.0.6/24"})
			h.run(attach("CHECK", "c1", more)).mustOK(t, "CHECK with a prevResult that also gives 10.1.0.6")

			other := h.steeredConfIn("1.0.0", "10.1.0.99/24", "fd00:1::5/64", sharedIP)
			other["traffic"] = tc.traffic
			before := h.settledView()
			h.run(attach("CHECK", "c1", other)).mustFail(t, "CHECK with a prevResult that gives the container 10.1.0.99 only",
				codeDrift, tc.parts...)
			h.mustBeUnchanged(t, "a CHECK failing on prevResult", before)
		})
	}
}

// The runtime must send CHECK the ADD's result; without it CHECK fails
// as ADD does (code 7), also for an attachment that asked for nothing.
func TestCheckWithoutPrevResultFailsAsAddDoes(t *testing.T) {
	for _, v := range checkVersions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			nothing := h.netConf(v, nil)
			h.run(attach("ADD", "c2", nothing)).mustOK(t, "ADD c2, which asks for nothing")
			before := h.settledView()
			for _, c := range []struct {
				id   string
				conf map[string]any
			}{{"c1", conf}, {"c2", nothing}} {
				for form, edit := range map[string]func(map[string]any){
					"absent": func(m map[string]any) { delete(m, "prevResult") },
					"null":   func(m map[string]any) { m["prevResult"] = nil },
				} {
					bare := maps.Clone(c.conf)
					edit(bare)
					h.run(attach("CHECK", c.id, bare)).mustFail(t, "CHECK "+c.id+" with prevResult "+form, 7, "prevResult", "missing")
				}
			}
			h.mustBeUnchanged(t, "CHECK without prevResult", before)
			h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK c1 with its prevResult")
			h.run(attach("CHECK", "c2", nothing)).mustOK(t, "CHECK c2 with its prevResult")
		})
	}
}
