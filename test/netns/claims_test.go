package netns

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// fakeNode stands in for external-ip-node on the plugin's socket: it
// records every request and answers as told.
type fakeNode struct {
	mu     sync.Mutex
	reqs   []nodeapi.Request
	answer func(nodeapi.Request) nodeapi.Response
	stop   func()
}

func (f *fakeNode) requests() []nodeapi.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// startFakeNode serves dataDir's socket and publishes that the cluster has
// pools, as the node process does, until the test ends.
func startFakeNode(t *testing.T, dataDir string, answer func(nodeapi.Request) nodeapi.Response) *fakeNode {
	t.Helper()
	f := &fakeNode{answer: answer}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := nodeapi.Listen(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		nodeapi.Serve(ctx, l, func(_ context.Context, req nodeapi.Request) (nodeapi.Response, func()) {
			f.mu.Lock()
			f.reqs = append(f.reqs, req)
			f.mu.Unlock()
			return f.answer(req), nil
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		close(done)
	}()
	f.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(f.stop)
	publishPools(t, dataDir)
	return f
}

func publishPools(t *testing.T, dataDir string) {
	t.Helper()
	if err := nodeapi.Publish(dataDir, nodeapi.Pools{Names: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
}

// podArgs is CNI_ARGS as containerd passes them for a pod.
const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=uid-1"

func poolAsk(h *host, command, containerID string, extra map[string]any) call {
	c := attach(command, containerID, h.netConf("1.0.0", extra))
	c.cniArgs = podArgs
	return c
}

func TestWithNoPoolInTheClusterANamedIPIsHeldWithoutTheNodeProcess(t *testing.T) {
	h := newHost(t)
	// No pools file, no socket: the path of every cluster before pools.
	c := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "192.0.2.40")})
	h.run(c).mustOK(t, "ADD of a named IP with no node process")
	h.mustHold(t, "after ADD", "eip0", "192.0.2.40/32")
	if _, err := os.Stat(filepath.Join(h.dataDir, "claims", "att")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(h.dataDir, "claims", "att"))
		if len(entries) > 0 {
			t.Errorf("an intent was written with no pool in the cluster: %v", entries)
		}
	}
	c.command = "DEL"
	h.run(c).mustOK(t, "DEL")
	h.mustHold(t, "after DEL", "eip0")
}

func TestAPoolADDHoldsWhatTheNodeProcessGaveAndItsDELReleasesItAfterTheNodeLetGo(t *testing.T) {
	h := newHost(t)
	var held []string
	f := startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		if req.Op == nodeapi.OpRelease {
			held = h.holderIPs("eip0") // what the node holds when it is told to release
			return nodeapi.Response{}
		}
		return nodeapi.Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.50"), netip.MustParseAddr("2001:db8:1::50")}}
	})
	c := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(c).mustOK(t, "pool ADD")
	h.mustHold(t, "after the pool ADD", "eip0", "192.0.2.50/32", "2001:db8:1::50/128")
	reqs := f.requests()
	want := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: store.Attachment{Network: "testnet", ContainerID: "c1", IfName: "eth0"},
		Pod: nodeapi.Pod{Namespace: "team-a", Name: "web-1", UID: "uid-1"}, Pool: "web"}
	if len(reqs) != 1 || reqs[0].Op != want.Op || reqs[0].Attachment != want.Attachment || reqs[0].Pod != want.Pod || reqs[0].Pool != "web" {
		t.Fatalf("the node process was asked %+v; want %+v", reqs, want)
	}
	if has, err := nodeapi.HasIntent(h.dataDir, want.Attachment); !has || err != nil {
		t.Errorf("no intent recorded for the attachment (%v)", err)
	}
	c.command = "DEL"
	c.cniArgs, c.conf = "", h.netConf("1.0.0", nil) // DEL works from the plugin's own records
	h.run(c).mustOK(t, "DEL")
	h.mustHold(t, "after DEL", "eip0")
	reqs = f.requests()
	if len(reqs) != 2 || reqs[1].Op != nodeapi.OpRelease || reqs[1].Attachment != want.Attachment {
		t.Fatalf("DEL asked %+v; want a release of %s", reqs[1:], want.Attachment)
	}
	if len(held) != 0 {
		t.Errorf("the release came while the node still held %v: another node could have taken them", held)
	}
	if has, _ := nodeapi.HasIntent(h.dataDir, want.Attachment); has {
		t.Error("the intent is still there after the release")
	}
}

func TestAPoolADDWithTheNodeProcessDownFailsWith11AndItsDELDefersTheRelease(t *testing.T) {
	h := newHost(t)
	f := startFakeNode(t, h.dataDir, func(nodeapi.Request) nodeapi.Response {
		return nodeapi.Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.52")}}
	})
	held := poolAsk(h, "ADD", "c0", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(held).mustOK(t, "a pool ADD while the node process is there")
	f.stop() // the node process goes away; its published file stays
	c := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(c).mustFail(t, "pool ADD with no node process", 11, "external-ip-node is not reachable at "+filepath.Join(h.dataDir, "node.sock"))
	// A named IP needs a claim too while pools exist.
	named := poolAsk(h, "ADD", "c2", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "192.0.2.41")})
	h.run(named).mustFail(t, "named ADD with pools and no node process", 11, "external-ip-node is not reachable")
	// Nothing held; the releases of what the node process might have
	// claimed without answering are deferred to it.
	h.mustHold(t, "after the refused ADDs", "eip0", "192.0.2.52/32")
	if d := deferredIDs(t, h); !slices.Equal(d, []string{"c1", "c2"}) {
		t.Errorf("deferred releases of %v, want c1 and c2's", d)
	}
	held.command, held.cniArgs, held.conf = "DEL", "", h.netConf("1.0.0", nil)
	h.run(held).mustOK(t, "DEL of a held pool IP with no node process")
	h.mustHold(t, "after DEL", "eip0")
	if d := deferredIDs(t, h); !slices.Equal(d, []string{"c0", "c1", "c2"}) {
		t.Errorf("deferred releases of %v, want c0's too, for the node process to carry out", d)
	}
}

func deferredIDs(t *testing.T, h *host) []string {
	t.Helper()
	deferred, err := nodeapi.Deferred(h.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range deferred {
		out = append(out, m.Attachment.ContainerID)
	}
	slices.Sort(out)
	return out
}

func TestARefusedClaimNamesTheSourceAndChangesNothing(t *testing.T) {
	h := newHost(t)
	startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		if req.Pool != "" {
			return nodeapi.Response{Reason: nodeapi.ReasonPoolExhausted, Message: "external-ip/pool: pool web has no free IPv4 address (4 of 4 claimed)"}
		}
		return nodeapi.Response{Reason: nodeapi.ReasonOwnedElsewhere, Message: "192.0.2.9: is owned by namespace team-b; a pod of namespace team-a may not hold it"}
	})
	before := h.view()
	named := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "203.0.113.9,192.0.2.9")})
	h.run(named).mustFail(t, "a named IP another namespace owns", 7,
		"pod annotation external-ip/addresses[1]: 192.0.2.9: is owned by namespace team-b")
	pool := poolAsk(h, "ADD", "c2", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(pool).mustFail(t, "an exhausted pool", 105, "external-ip/pool: pool web has no free IPv4 address")
	h.mustBeUnchanged(t, "the refused ADDs", before)
}

func TestAPoolsHoldDecidesHowItsIPsAreHeld(t *testing.T) {
	h := newHost(t)
	startFakeNode(t, h.dataDir, func(req nodeapi.Request) nodeapi.Response {
		return nodeapi.Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.51")}, Hold: "route"}
	})
	h.forwardIPv4() // proxy ARP, which route mode answers with, needs it
	// traffic none holds as addresses; the pool says route.
	c := poolAsk(h, "ADD", "c1", map[string]any{"runtimeConfig": annotations("external-ip/pool", "web")})
	h.run(c).mustOK(t, "pool ADD")
	if route, proxy := h.routeState("192.0.2.51"); !route || !proxy {
		t.Errorf("the pool's IP held as a route: %v, proxied: %v; want both (the pool's hold: route)", route, proxy)
	}
	h.mustHold(t, "in route mode", "eip0")
}
