package netns

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// The node-local pools of the config (key pools), asked for as podman
// (CNI_ARGS EXTERNAL_IP_POOL) and cnitool (runtimeConfig.externalIPPool)
// ask, with no node process and no cluster.

// poolConf is the test network with a pool web of the given ranges.
func (h *host) poolConf(cniVersion string, ranges []string, extra map[string]any) map[string]any {
	conf := h.netConf(cniVersion, extra)
	conf["pools"] = map[string]any{"web": ranges}
	return conf
}

// podmanPool is an ADD or DEL of containerID as podman makes it, asking
// for pool in CNI_ARGS; namespace, when set, is the pod's.
func podmanPool(command, containerID, pool, namespace string, conf map[string]any) call {
	c := attach(command, containerID, conf)
	c.cniArgs = "IgnoreUnknown=1;EXTERNAL_IP_POOL=" + pool
	if namespace != "" {
		c.cniArgs += ";K8S_POD_NAMESPACE=" + namespace
	}
	return c
}

// holdersByIP reads status: each held IP and the containers holding it,
// failing on any drift between state and kernel.
func (h *host) holdersByIP(when string) map[string][]string {
	h.t.Helper()
	out := map[string][]string{}
	for _, r := range h.status() {
		if len(r.Drift) > 0 {
			h.t.Fatalf("%s: drift between state and kernel: %v", when, r.Drift)
		}
		for _, ip := range r.IPs {
			if !ip.OnDevice {
				h.t.Fatalf("%s: %s is held but not on the device", when, ip.IP)
			}
			for _, hd := range ip.Holders {
				out[ip.IP] = append(out[ip.IP], hd.ContainerID)
			}
			sort.Strings(out[ip.IP])
		}
	}
	return out
}

// ipsOf are the IPs that containerID holds, sorted.
func ipsOf(held map[string][]string, containerID string) []string {
	var out []string
	for ip, hs := range held {
		if slices.Contains(hs, containerID) {
			out = append(out, ip)
		}
	}
	sort.Strings(out)
	return out
}

// mustGiveNothingTwice fails when an IP of the pool has more than one holder.
func mustGiveNothingTwice(t *testing.T, when string, held map[string][]string) {
	t.Helper()
	for ip, hs := range held {
		if len(hs) > 1 {
			t.Fatalf("%s: %s given to %v", when, ip, hs)
		}
	}
}

func TestAPoolOfTheConfigGivesEachAttachmentItsOwnIPOfEachFamily(t *testing.T) {
	h := newHost(t)
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.101", "2001:db8:1::100/127"}, nil)
	h.run(podmanPool("ADD", "c1", "web", "", conf)).mustOK(t, "ADD c1")
	h.run(podmanPool("ADD", "c2", "web", "", conf)).mustOK(t, "ADD c2")
	held := h.holdersByIP("after two pool ADDs")
	if got := ipsOf(held, "c1"); !slices.Equal(got, []string{"192.0.2.100", "2001:db8:1::100"}) {
		t.Fatalf("c1 holds %v; want the first IP of each family", got)
	}
	if got := ipsOf(held, "c2"); !slices.Equal(got, []string{"192.0.2.101", "2001:db8:1::101"}) {
		t.Fatalf("c2 holds %v; want the next IP of each family", got)
	}
	mustGiveNothingTwice(t, "after two pool ADDs", held)
	h.run(podmanPool("ADD", "c2", "web", "", conf)).mustOK(t, "re-ADD c2")
	if got := ipsOf(h.holdersByIP("after re-ADD"), "c2"); !slices.Equal(got, []string{"192.0.2.101", "2001:db8:1::101"}) {
		t.Fatalf("re-ADD of c2 holds %v; want what it was given", got)
	}
	check := podmanPool("CHECK", "c2", "web", "", conf)
	h.run(check).mustOK(t, "CHECK of a pool attachment")

	before := h.view()
	h.run(podmanPool("ADD", "c3", "web", "", conf)).mustFail(t, "ADD from an exhausted pool", 105,
		"CNI_ARGS EXTERNAL_IP_POOL: pool web has no free IPv4 address (2 of 2 held)")
	h.mustBeUnchanged(t, "the refused ADD", before)

	del := podmanPool("DEL", "c1", "web", "", conf)
	h.run(del).mustOK(t, "DEL c1")
	h.run(del).mustOK(t, "DEL c1 again")
	h.mustHold(t, "after DEL c1", "eip0", "192.0.2.101/32", "2001:db8:1::101/128")
	h.run(podmanPool("ADD", "c3", "web", "", conf)).mustOK(t, "ADD c3 after the release")
	if got := ipsOf(h.holdersByIP("after ADD c3"), "c3"); !slices.Equal(got, []string{"192.0.2.100", "2001:db8:1::100"}) {
		t.Fatalf("c3 holds %v; want c1's released IPs", got)
	}
	for _, id := range []string{"c2", "c3"} {
		h.run(podmanPool("DEL", id, "web", "", conf)).mustOK(t, "DEL "+id)
	}
	h.mustHold(t, "after every DEL", "eip0")
}

func TestAPoolIPIsSharedWithinItsOwnerAndRefusedToAnotherNamingIt(t *testing.T) {
	h := newHost(t)
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.101"}, nil)
	h.run(podmanPool("ADD", "a1", "web", "team-a", conf)).mustOK(t, "pool ADD of team-a")
	named := func(id, namespace string, c map[string]any) call {
		x := attach("ADD", id, c)
		x.cniArgs = "EXTERNAL_IPS=192.0.2.100"
		if namespace != "" {
			x.cniArgs += ";K8S_POD_NAMESPACE=" + namespace
		}
		return x
	}
	h.run(named("a2", "team-a", conf)).mustOK(t, "team-a naming its own pool IP")
	if got := h.holdersByIP("after the share")["192.0.2.100"]; !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("192.0.2.100 held by %v; want a1 and a2", got)
	}
	before := h.view()
	h.run(named("b1", "team-b", conf)).mustFail(t, "team-b naming team-a's IP", 7,
		"CNI_ARGS EXTERNAL_IPS[0]: 192.0.2.100: is owned by namespace team-a; an attachment of namespace team-b may not hold it")
	other := h.netConf("1.0.0", nil)
	other["name"] = "othernet" // no pools of its own
	h.run(named("o1", "", other)).mustFail(t, "another network naming it", 7, "is owned by namespace team-a; an attachment of network othernet may not hold it")
	h.mustBeUnchanged(t, "the refused ADDs", before)

	h.run(podmanPool("DEL", "a1", "web", "team-a", conf)).mustOK(t, "DEL a1")
	h.mustHold(t, "while a2 still holds it", "eip0", "192.0.2.100/32")
	h.run(podmanPool("ADD", "a3", "web", "team-a", conf)).mustOK(t, "pool ADD while a2 holds .100")
	if got := ipsOf(h.holdersByIP("after ADD a3"), "a3"); !slices.Equal(got, []string{"192.0.2.101"}) {
		t.Fatalf("a3 holds %v; want 192.0.2.101: a pool gives an IP no one holds", got)
	}
	h.run(podmanPool("DEL", "a2", "", "", conf)).mustOK(t, "DEL a2")
	h.run(named("b1", "team-b", conf)).mustOK(t, "team-b naming .100 after its last holder left")
}

// TestAPoolReADDKeepsItsIPWhileASiblingSharesIt: a1 is given .100 from
// the pool; a2 of the same owner names .100 and shares it, as the docs
// allow. A re-ADD of a1 (same container, same request) must keep .100 and
// not move a1 to another IP of the pool.
func TestAPoolReADDKeepsItsIPWhileASiblingSharesIt(t *testing.T) {
	h := newHost(t)
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.101"}, nil)
	h.run(podmanPool("ADD", "a1", "web", "team-a", conf)).mustOK(t, "pool ADD of a1")
	a2 := attach("ADD", "a2", conf)
	a2.cniArgs = "EXTERNAL_IPS=192.0.2.100;K8S_POD_NAMESPACE=team-a"
	h.run(a2).mustOK(t, "a2 naming a1's pool IP")
	r := h.run(podmanPool("ADD", "a1", "web", "team-a", conf))
	r.mustOK(t, "re-ADD of a1")
	held := h.holdersByIP("after the re-ADD")
	if got := ipsOf(held, "a1"); !slices.Equal(got, []string{"192.0.2.100"}) {
		t.Errorf("after its re-ADD a1 holds %v, want 192.0.2.100, what it was given (holders: %v)", got, held)
	}
}

// TestAPoolPassesOverAnIPAnotherLANHostUses: one stray host on the LAN
// uses the lowest IP of a pool. The pool still has two free IPs; every
// ADD must not be given (and refused for) that one IP forever. On a
// network that stands by, the IP must not be held in standby either: the
// host answering for it holds it for no sibling of the pod.
func TestAPoolPassesOverAnIPAnotherLANHostUses(t *testing.T) {
	for _, standby := range []bool{false, true} {
		t.Run(fmt.Sprintf("standby=%v", standby), func(t *testing.T) {
			h := newHost(t)
			h.waitLAN()
			h.lanTakes("192.0.2.100")
			conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.102"}, map[string]any{"conflictProbe": "200ms", "standby": standby})
			for _, id := range []string{"c1", "c2"} {
				h.run(podmanPool("ADD", id, "web", "", conf)).mustOK(t, "pool ADD "+id+" while 192.0.2.101 and .102 are free")
			}
			for _, r := range h.status() {
				for _, ip := range r.IPs {
					if ip.IP == "192.0.2.100" {
						t.Errorf("the node holds the IP the LAN host uses: %+v", ip)
					}
				}
			}
			held := h.holdersByIP("after two pool ADDs")
			if got, want := [][]string{ipsOf(held, "c1"), ipsOf(held, "c2")}, [][]string{{"192.0.2.101"}, {"192.0.2.102"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("c1 and c2 hold %v, want %v: the IPs nobody on the LAN uses (holders: %v)", got, want, held)
			}
		})
	}
}

// TestAPoolWhoseFreeIPsOtherLANHostsUseSaysSo: when every free IP of a
// pool is answered for on the LAN, the ADD is refused as exhausted, and
// the message names what it passed over and who answered, so that the
// user can tell a full pool from a LAN to fix.
func TestAPoolWhoseFreeIPsOtherLANHostsUseSaysSo(t *testing.T) {
	h := newHost(t)
	h.waitLAN()
	h.lanTakes("192.0.2.100")
	h.lanTakes("192.0.2.101")
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.101"}, map[string]any{"conflictProbe": "200ms"})
	before := h.view()
	lanMAC := h.linkMAC(h.lan, "lan0")
	h.run(podmanPool("ADD", "c1", "web", "", conf)).mustFail(t, "pool ADD with both IPs used on the LAN", 105,
		"pool web has no free IPv4 address (0 of 2 held)",
		"passed over, as other hosts on the LAN use them: 192.0.2.100 (by "+lanMAC+"), 192.0.2.101 (by "+lanMAC+")")
	h.mustBeUnchanged(t, "the refused ADD", before)
}

// TestAPoolADDStopsPassingOverIPsAfterItsTries: each IP passed over costs
// a probe window, so an ADD tries a bounded number (8) and is then
// refused as a conflict, naming the pool and every IP it tried, although
// the pool still has a free IP beyond them.
func TestAPoolADDStopsPassingOverIPsAfterItsTries(t *testing.T) {
	h := newHost(t)
	h.waitLAN()
	var tried []string
	for i := 100; i < 108; i++ {
		ip := fmt.Sprintf("192.0.2.%d", i)
		h.lanTakes(ip)
		tried = append(tried, ip+" (by ")
	}
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.109"}, map[string]any{"conflictProbe": "100ms"})
	before := h.view()
	h.run(podmanPool("ADD", "c1", "web", "", conf)).mustFail(t, "pool ADD past its tries", 103,
		append([]string{"pool web: other hosts on the LAN answered the conflict probe for every IP tried: "}, tried...)...)
	h.mustBeUnchanged(t, "the refused ADD", before)
}

func TestARequestForAPoolNeitherTheConfigNorTheClusterHasIsRefused(t *testing.T) {
	h := newHost(t)
	conf := h.poolConf("1.1.0", []string{"192.0.2.100/31"}, map[string]any{"runtimeConfig": map[string]any{"externalIPPool": "db"}})
	before := h.settledView()
	h.run(attach("ADD", "c1", conf)).mustFail(t, "cnitool ADD of an unknown pool", 7,
		`runtimeConfig.externalIPPool: "db" is not a pool of network testnet (its pools: web), and no node process serves the cluster's pools`)
	c := podmanPool("ADD", "c1", "db", "", h.poolConf("1.0.0", []string{"192.0.2.100/31"}, nil))
	h.run(c).mustFail(t, "podman ADD of an unknown pool", 7, `CNI_ARGS EXTERNAL_IP_POOL: "db" is not a pool`)
	c.cniArgs = "EXTERNAL_IP_POOL=web"
	c.conf = h.poolConf("1.0.0", []string{"192.0.2.100/31"}, map[string]any{"runtimeConfig": map[string]any{"externalIPPool": "other"}})
	h.run(c).mustFail(t, "two pools asked", 7, `CNI_ARGS EXTERNAL_IP_POOL: "web" differs from runtimeConfig.externalIPPool "other"`)
	h.mustBeUnchanged(t, "the refused ADDs", before)
}

func TestCnitoolsRuntimeConfigAsksThePoolAndCheckAndGCKeepWhatItGave(t *testing.T) {
	h := newHost(t)
	ask := map[string]any{"runtimeConfig": map[string]any{"externalIPPool": "web"}}
	conf := h.poolConf("1.1.0", []string{"192.0.2.100-192.0.2.102"}, ask)
	for _, id := range []string{"c1", "c2", "c3"} {
		h.run(attach("ADD", id, conf)).mustOK(t, "cnitool ADD "+id)
	}
	h.run(attach("CHECK", "c2", conf)).mustOK(t, "CHECK c2")
	held := h.holdersByIP("after three ADDs")
	mustGiveNothingTwice(t, "after three ADDs", held)
	gone := ipsOf(held, "c1")
	if len(gone) != 1 {
		t.Fatalf("c1 holds %v; want one IPv4 address", gone)
	}
	h.run(call{command: "GC", conf: h.gcConf("testnet", []string{"c2", "c3"}, nil)}).mustOK(t, "GC keeping c2 and c3")
	held = h.holdersByIP("after GC")
	if _, ok := held[gone[0]]; ok {
		t.Fatalf("after GC, %s is still held by %v: GC did not release the gone attachment's pool IP", gone[0], held[gone[0]])
	}
	h.run(attach("ADD", "c4", conf)).mustOK(t, "ADD c4 after GC")
	if got := ipsOf(h.holdersByIP("after ADD c4"), "c4"); !slices.Equal(got, gone) {
		t.Fatalf("c4 holds %v; want %v, which GC released", got, gone)
	}
}

func TestConcurrentPoolADDsGiveEveryAttachmentADistinctIP(t *testing.T) {
	h := newHost(t)
	conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.107"}, nil)
	const n = 10 // two more than the pool has
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.run(podmanPool("ADD", fmt.Sprintf("c%d", i), "web", "", conf))
		}()
	}
	wg.Wait()
	ok, exhausted := 0, 0
	for i, r := range results {
		switch {
		case r.err == nil:
			ok++
		case r.code == 105:
			exhausted++
		default:
			t.Errorf("ADD c%d: code %d %q; want success or 105", i, r.code, r.msg)
		}
	}
	held := h.holdersByIP("after the concurrent ADDs")
	mustGiveNothingTwice(t, "after the concurrent ADDs", held)
	if ok != 8 || exhausted != 2 || len(held) != 8 {
		t.Fatalf("%d ADDs held, %d refused as exhausted, %d IPs held; want 8, 2, 8", ok, exhausted, len(held))
	}
}

func TestAPoolADDKilledAtAnyStepLosesAndDoublesNothing(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range addSteps {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			conf := h.poolConf("1.0.0", []string{"192.0.2.100-192.0.2.102", "2001:db8:1::100/127"}, nil)
			r := h.runWith(bin, podmanPool("ADD", "a", "web", "", conf), assigner.CrashEnv+"="+step)
			if r.err == nil {
				t.Fatalf("the pool ADD was not killed at step %q", step)
			}
			// The next ADD settles the killed one (rolled back: its runtime
			// took it as failed), so the IPs it chose are free again.
			h.run(podmanPool("ADD", "b", "web", "", conf)).mustOK(t, "ADD b after the kill")
			held := h.holdersByIP("after ADD b")
			if got := ipsOf(held, "a"); len(got) != 0 {
				t.Fatalf("the killed ADD still holds %v", got)
			}
			if got := ipsOf(held, "b"); !slices.Equal(got, []string{"192.0.2.100", "2001:db8:1::100"}) {
				t.Fatalf("b holds %v; want the first IPs, which the killed ADD must not have kept", got)
			}
			h.run(podmanPool("DEL", "a", "web", "", conf)).mustOK(t, "the runtime's DEL of the killed ADD")
			h.run(podmanPool("ADD", "a", "web", "", conf)).mustOK(t, "the runtime's retried ADD")
			held = h.holdersByIP("after the retried ADD")
			mustGiveNothingTwice(t, "after the retried ADD", held)
			if got := ipsOf(held, "a"); !slices.Equal(got, []string{"192.0.2.101", "2001:db8:1::101"}) {
				t.Fatalf("the retried ADD holds %v; want the next free IPs", got)
			}
			for _, id := range []string{"a", "b"} {
				h.run(podmanPool("DEL", id, "", "", conf)).mustOK(t, "DEL "+id)
			}
			if held := h.holdersByIP("after every DEL"); len(held) != 0 {
				t.Fatalf("after every DEL, still held: %v", held)
			}
		})
	}
}
