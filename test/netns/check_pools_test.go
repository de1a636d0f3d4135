package netns

import (
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// An attachment that asked only a pool names no IP, yet its CHECK must
// check what the pool gave: the record, and each IP on the holder.
func TestCheckOfAPoolOnlyAttachmentFailsWhenItsIPIsGoneOrItHasNoRecord(t *testing.T) {
	for _, asked := range []string{"runtimeConfig.externalIPPool", "CNI_ARGS EXTERNAL_IP_POOL"} {
		t.Run(asked, func(t *testing.T) {
			h := newHost(t)
			conf := h.poolConf("1.1.0", []string{"192.0.2.100-192.0.2.102"}, nil)
			c := podmanPool("ADD", "p1", "web", "", conf)
			if asked == "runtimeConfig.externalIPPool" {
				conf["runtimeConfig"] = map[string]any{"externalIPPool": "web"}
				c = attach("ADD", "p1", conf)
			}
			h.run(c).mustOK(t, "pool ADD p1")
			h.mustHold(t, "after the pool ADD", "eip0", "192.0.2.100/32")
			c.command = "CHECK"
			h.run(c).mustOK(t, "CHECK right after the pool ADD")
			h.inNode("ip addr flush dev eip0")
			h.run(c).mustFail(t, "CHECK of p1 after its IP was flushed from eip0", codeDrift, "192.0.2.100", "eip0")
			c.command = "ADD"
			h.run(c).mustOK(t, "re-ADD p1")
			c.command = "CHECK"
			h.run(c).mustOK(t, "CHECK after the re-ADD put the IP back")
			c.command = "DEL"
			h.run(c).mustOK(t, "DEL p1")
			c.command = "CHECK"
			h.run(c).mustFail(t, "CHECK of p1 after its DEL", codeDrift, "p1", "no record")
		})
	}
}

// The cluster's pool (annotation external-ip/pool) is the node process's
// to give; CHECK reads what the record holds, without asking it.
func TestCheckOfAClusterPoolAttachmentFailsWhenItsIPIsGoneOrItHasNoRecord(t *testing.T) {
	h := newHost(t)
	f := startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		return nodeapi.Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.50")}}
	})
	c := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(c).mustOK(t, "pool ADD")
	c.command = "CHECK"
	h.run(c).mustOK(t, "CHECK right after the pool ADD")
	asked := len(f.requests())
	h.inNode("ip addr flush dev eip0")
	h.run(c).mustFail(t, "CHECK after the pool's IP was flushed from eip0", codeDrift, "192.0.2.50", "eip0")
	c.command = "DEL"
	h.run(c).mustOK(t, "DEL")
	c.command = "CHECK"
	h.run(c).mustFail(t, "CHECK after the DEL", codeDrift, "c1", "no record")
	if n := len(f.requests()); n != asked+1 {
		t.Errorf("the node process was asked %d times after the first CHECK, want once (the DEL's release): CHECK asks nothing", n-asked)
	}
}

// While the cluster has pools, ADD holds a named IP outside allowedRanges
// once the node process claimed it; CHECK reads the request as ADD did.
func TestCheckReadsANamedIPAsTheADDDidWhileTheClusterHasPools(t *testing.T) {
	h := newHost(t)
	startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		return nodeapi.Response{Addresses: req.Addresses}
	})
	c := poolAsk(h, "ADD", "c1", map[string]any{"uplink": "uplink0", "runtimeConfig": annotations("external-ip/addresses", "198.51.100.7")})
	h.run(c).mustOK(t, "ADD of a named IP outside allowedRanges, claimed by the node process")
	h.mustHold(t, "after ADD", "eip0", "198.51.100.7/32")
	c.command = "CHECK"
	h.run(c).mustOK(t, "CHECK of the claimed IP")
	h.inNode("ip addr flush dev eip0")
	h.run(c).mustFail(t, "CHECK after the IP was flushed", codeDrift, "198.51.100.7")
}
