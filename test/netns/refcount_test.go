package netns

import (
	"fmt"
	"testing"
)

const sharedIP = "192.0.2.10"

func TestSharedIPStaysUntilTheLastHolderIsDeleted(t *testing.T) {
	orders := []struct {
		name          string
		first, second string
	}{
		{"first added is deleted first", "c1", "c2"},
		{"last added is deleted first", "c2", "c1"},
	}
	for _, v := range versions {
		for _, o := range orders {
			t.Run(v+"/"+o.name, func(t *testing.T) {
				h := newHost(t)
				conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
				h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
				h.run(attach("ADD", "c2", conf)).mustOK(t, "ADD c2")
				h.mustHold(t, "after both ADDs", "eip0", sharedIP+"/32")

				h.run(attach("DEL", o.first, conf)).mustOK(t, "DEL "+o.first)
				h.mustHold(t, "DEL "+o.first+" while "+o.second+" still holds the IP", "eip0", sharedIP+"/32")

				h.run(attach("DEL", o.second, conf)).mustOK(t, "DEL "+o.second)
				h.mustHold(t, "after DEL of the last holder "+o.second, "eip0")
			})
		}
	}
}

func TestRepeatedAddOfOneAttachmentCountsOnce(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			for i := range 3 {
				h.run(attach("ADD", "c1", conf)).mustOK(t, fmt.Sprintf("ADD c1 #%d", i+1))
			}
			h.mustHold(t, "after three ADDs of c1", "eip0", sharedIP+"/32")
			h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL c1")
			h.mustHold(t, "one DEL after repeated ADDs of the same attachment (counted more than once?)", "eip0")
		})
	}
}

func TestRepeatedDelReleasesOnceAndChangesNothing(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.run(attach("ADD", "c2", conf)).mustOK(t, "ADD c2")

			h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL c1")
			before := h.settledView()
			h.run(attach("DEL", "c1", conf)).mustOK(t, "repeated DEL c1")
			h.mustBeUnchanged(t, "repeated DEL c1", before)
			h.mustHold(t, "c1 deleted twice while c2 holds the IP (released twice?)", "eip0", sharedIP+"/32")

			h.run(attach("DEL", "c2", conf)).mustOK(t, "DEL c2")
			h.mustHold(t, "after DEL of the last holder c2", "eip0")
			before = h.view()
			h.run(attach("DEL", "c2", conf)).mustOK(t, "repeated DEL c2")
			h.mustBeUnchanged(t, "repeated DEL c2 after the IP was released", before)
		})
	}
}

func TestDelWithBareConfigAndNoNetnsReleasesTheIP(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP, "2001:db8:1::10")})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			h.mustHold(t, "after ADD", "eip0", sharedIP+"/32", "2001:db8:1::10/128")

			bare := map[string]any{"cniVersion": v, "name": "testnet", "type": "external-ip", "dataDir": h.dataDir}
			del := call{command: "DEL", containerID: "c1", ifName: "eth0", netns: "", conf: bare}
			h.run(del).mustOK(t, "DEL with a bare config and an empty CNI_NETNS")
			h.mustHold(t, "DEL with no runtimeConfig did not release from the stored record", "eip0")
			if h.proxied("2001:db8:1::10", "uplink0") {
				t.Fatal("after DEL with a bare config, the proxy entry for 2001:db8:1::10 is still on uplink0")
			}
		})
	}
}

func TestDelOfAnAttachmentNeverAddedSucceedsAndCreatesNothing(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			before := h.settledView()
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL of an attachment never added")
			h.mustBeUnchanged(t, "DEL of an attachment never added", before)
		})
	}
}

func TestDelSucceedsAfterTheHolderWasDeletedByHand(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP, "2001:db8:1::10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	h.inNode("ip link del eip0")
	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL after eip0 was deleted by hand")
	if h.deviceExists("eip0") {
		t.Fatal("DEL re-created the holder device eip0")
	}
	if h.proxied("2001:db8:1::10", "uplink0") {
		t.Fatal("DEL left the proxy entry for 2001:db8:1::10 on uplink0")
	}
	h.run(attach("DEL", "c1", conf)).mustOK(t, "second DEL after eip0 was deleted by hand")

	// Had c1's record survived, c2's DEL would leave the IP held.
	h.run(attach("ADD", "c2", conf)).mustOK(t, "ADD c2 after c1 was released")
	h.mustHold(t, "ADD c2 after eip0 was deleted by hand", "eip0", sharedIP+"/32", "2001:db8:1::10/128")
	h.run(attach("DEL", "c2", conf)).mustOK(t, "DEL c2")
	h.mustHold(t, "DEL c2, the only holder left (c1's record survived its DEL?)", "eip0")
}
