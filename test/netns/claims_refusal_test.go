package netns

import (
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// An ADD refuses what the container cannot take (its own address, a
// family it cannot be steered in) before it asks the node process for a
// claim, or, when only the claim's answer shows it, gives the claim back
// at once: neither claim nor intent waits for the runtime's DEL.
func TestARefusedADDLeavesNoClaimBehind(t *testing.T) {
	h := newHost(t)
	f := startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		if req.Op == nodeapi.OpRelease {
			return nodeapi.Response{}
		}
		if req.Pool != "" { // a dual-stack pool
			return nodeapi.Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.50"), netip.MustParseAddr("2001:db8:1::50")}}
		}
		return nodeapi.Response{Addresses: req.Addresses}
	})
	v4only := h.netConf("1.0.0", map[string]any{"traffic": "both", "runtimeConfig": annotations("external-ip/pool", "web")})
	prev := v4only["prevResult"].(map[string]any)
	prev["ips"] = prev["ips"].([]any)[:1]
	before := h.view()

	own := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "10.1.0.5")})
	h.run(own).mustFail(t, "ADD naming the container's own address", 7, "10.1.0.5", "container's own address")
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("the refused ADD asked the node process %+v; want nothing asked", reqs)
	}

	pool := attach("ADD", "c2", v4only)
	pool.cniArgs = podArgs
	h.run(pool).mustFail(t, "ADD of a dual-stack pool for an IPv4-only container", 7, "2001:db8:1::50", "IPv6")
	reqs := f.requests()
	c2 := store.Attachment{Network: "testnet", ContainerID: "c2", IfName: "eth0"}
	if len(reqs) != 2 || reqs[0].Op != nodeapi.OpClaim || reqs[1].Op != nodeapi.OpRelease || reqs[1].Attachment != c2 {
		t.Errorf("the node process was asked %+v; want a claim, then its release", reqs)
	}
	if has, err := nodeapi.HasIntent(h.dataDir, c2); has || err != nil {
		t.Errorf("the refused ADD left its intent (%v)", err)
	}
	h.mustBeUnchanged(t, "the refused ADDs", before)
}
