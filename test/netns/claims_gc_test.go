package netns

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// A GC that cannot release one stale record (its IP's index entry is
// corrupt) releases the others and gives back their claims at once, as
// their DELs would have; the one it left keeps its claim and its intent
// until a GC releases it.
func TestAPartialGCGivesBackTheClaimsOfWhatItCollected(t *testing.T) {
	h := newHost(t)
	ips := map[string]netip.Addr{"c1": netip.MustParseAddr("192.0.2.51"), "c2": netip.MustParseAddr("192.0.2.52")}
	f := startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		if req.Op == nodeapi.OpRelease {
			return nodeapi.Response{}
		}
		return nodeapi.Response{Addresses: []netip.Addr{ips[req.Attachment.ContainerID]}}
	})
	for id := range ips {
		h.run(poolAsk(h, "ADD", id, map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})).mustOK(t, "pool ADD of "+id)
	}
	index := store.New(h.dataDir, "eip0").IPPath(ips["c2"])
	if err := os.WriteFile(index, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}

	h.run(call{command: "GC", conf: h.gcConf("testnet", []string{}, nil)}).mustFail(t, "GC past c2's corrupt index entry", 5, index)

	c1 := store.Attachment{Network: "testnet", ContainerID: "c1", IfName: "eth0"}
	c2 := store.Attachment{Network: "testnet", ContainerID: "c2", IfName: "eth0"}
	var released []store.Attachment
	for _, r := range f.requests() {
		if r.Op == nodeapi.OpRelease {
			released = append(released, r.Attachment)
		}
	}
	if !slices.Equal(released, []store.Attachment{c1}) {
		t.Errorf("the partial GC gave back the claims of %v; want those of %s alone (the one it collected)", released, c1)
	}
	if has, err := nodeapi.HasIntent(h.dataDir, c1); has || err != nil {
		t.Errorf("c1's intent is still there after the partial GC collected it (%v)", err)
	}
	if has, err := nodeapi.HasIntent(h.dataDir, c2); !has || err != nil {
		t.Errorf("c2's intent is gone though its record could not be released (%v)", err)
	}
}
