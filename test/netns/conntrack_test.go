package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/forget"
	"github.com/external-ip/external-ip/pkg/steer"
)

// busyEntries is how many unrelated conntrack entries of each family the
// busy node holds: the walk that finds a gone target's entries passes
// every one of them.
const busyEntries = 100_000

// pluginConf is the world's external-ip entry as a runtime sends it to
// the plugin alone (DEL and GC need no prevResult).
func (w *world) pluginConf(cniVersion string) map[string]any {
	return map[string]any{
		"cniVersion": cniVersion, "name": "steer", "type": "external-ip",
		"dataDir": w.h.dataDir, "traffic": w.traffic,
		"allowedRanges": []string{subnet4, subnet6}, "conflictProbe": "0s",
	}
}

// flowsToBoth connects from the LAN to each external IP until both
// holders have flows of each family (the spread alternates).
func (w *world) flowsToBoth(a, b *container) {
	w.t.Helper()
	families(w.t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		for i := range 8 {
			if _, _, err := ask(t, nsPath(w.h.lan), "tcp", ext, svPort); err != nil {
				t.Fatalf("connection %d to %s: %v", i, ext, err)
			}
		}
		for _, c := range []*container{a, b} {
			if w.conntrackTo(ext, addr(c)) == "" {
				t.Fatalf("no flow to %s went to %s", ext, addr(c))
			}
		}
	})
}

// twoHoldersWithFlows ADDs a and b, both holding both external IPs and
// serving, with flows from the LAN to each (flowsToBoth).
func (w *world) twoHoldersWithFlows() (a, b *container) {
	w.t.Helper()
	a, b = w.add("a", extV4, extV6), w.add("b", extV4, extV6)
	serve(w.t, a.netns, "a", svPort)
	serve(w.t, b.netns, "b", svPort)
	w.flowsToBoth(a, b)
	return a, b
}

// fillConntrack adds n unrelated UDP entries of each family to the node.
func (w *world) fillConntrack(n int) {
	w.t.Helper()
	start := time.Now()
	w.inNode("filling conntrack", func() error {
		for i := range n {
			for _, p := range [][2]netip.Addr{
				{netip.MustParseAddr("198.51.100.77"), netip.AddrFrom4([4]byte{203, 0, 113, byte(i % 250)})},
				{netip.MustParseAddr("2001:db8:ff::7"), netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xfe, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})},
			} {
				fam := netlink.InetFamily(unix.AF_INET)
				if p[0].Is6() {
					fam = unix.AF_INET6
				}
				sport := uint16(1024 + i%60000)
				f := &netlink.ConntrackFlow{FamilyType: uint8(fam), TimeOut: 3600,
					Forward: netlink.IPTuple{SrcIP: p[0].AsSlice(), DstIP: p[1].AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: sport, DstPort: 53},
					Reverse: netlink.IPTuple{SrcIP: p[1].AsSlice(), DstIP: p[0].AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: sport}}
				if err := netlink.ConntrackCreate(netlink.ConntrackTable, fam, f); err != nil {
					return fmt.Errorf("entry %d: %w", i, err)
				}
			}
		}
		return nil
	})
	w.t.Logf("%d conntrack entries of each family made in %v", n, time.Since(start).Round(time.Millisecond))
}

// goneAfter fails when, bound after since, an entry to an external IP
// still goes to c. It waits out the bound and looks once: listing a busy
// table takes conntrack -L most of a second, too slow to poll with.
func (w *world) goneAfter(c *container, bound time.Duration, since time.Time) {
	w.t.Helper()
	time.Sleep(time.Until(since.Add(bound)))
	families(w.t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if left := w.conntrackTo(ext, addr(c)); left != "" {
			t.Errorf("%v after, conntrack still has flows to %s DNATed to the gone %s:\n%s", bound, ext, addr(c), left)
		}
	})
}

// kept fails when the clean-ups deleted the flows of c, a holder that
// stays.
func (w *world) kept(c *container) {
	w.t.Helper()
	families(w.t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if w.conntrackTo(ext, addr(c)) == "" {
			t.Errorf("the clean-ups deleted the remaining holder's flows to %s too", ext)
		}
	})
}

// goneWithin polls until no entry to an external IP goes to c, and fails
// when some still does bound after since.
func (w *world) goneWithin(c *container, bound time.Duration, since time.Time) {
	w.t.Helper()
	families(w.t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		for {
			left := w.conntrackTo(ext, addr(c))
			if left == "" {
				return
			}
			if time.Since(since) > bound {
				t.Fatalf("%v after, conntrack still has flows to %s DNATed to the gone %s:\n%s", bound, ext, addr(c), left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// longFlows adds, to what flowsToBoth made, an established entry from the
// LAN to each external IP DNATed to c that lives an hour, as a long
// connection's would: a slow run must not see the others time out and
// take that for a clean-up.
func (w *world) longFlows(c *container, sport int) {
	w.t.Helper()
	families(w.t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		w.h.inNode("conntrack -I -p tcp -s %s -d %s --sport %d --dport %s --dst-nat %s -t 3600 --state ESTABLISHED -u SEEN_REPLY,ASSURED",
			lan, ext, sport, svPort, addr(c))
	})
}

// On a node with 100,000 conntrack entries of each family, a DEL's
// clean-up holds no lock: while it is stalled (faultinject, after reading
// its queue) an ADD of another attachment completes; once it goes on, the
// gone target's entries are deleted within forget.Bound, and the
// remaining holder's stay.
func TestADelOnABusyNodeCleansConntrackOffTheLockWithinTheBound(t *testing.T) {
	w := newWorld(t, "both")
	a, b := w.twoHoldersWithFlows()
	w.longFlows(a, 40000)
	w.longFlows(b, 40001)
	w.fillConntrack(busyEntries)
	fifo := stallFifo(t)
	bin := faultBinary(t)
	del := time.Now()
	w.h.runWith(bin, attach("DEL", b.id, w.pluginConf("1.0.0")), forget.StallEnv+"="+fifo).mustOK(t, "DEL of b")
	t.Logf("DEL returned in %v", time.Since(del).Round(time.Millisecond))
	w.add("c", extV4, extV6) // takes the lock while the clean-up is stalled
	release := stalled(t, fifo)
	went := time.Now()
	release.Close()
	w.goneAfter(b, forget.Bound, went)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if w.conntrackTo(ext, addr(a)) == "" {
			t.Errorf("the clean-up of b deleted a's flows to %s too", ext)
		}
	})
	for _, r := range w.h.status() {
		if len(r.Drift) > 0 {
			t.Errorf("drift after the clean-up: %v", r.Drift)
		}
	}
}

// On a node with conntrack entries, a DEL whose external IPs never had a
// flow starts no clean-up: our rules record an IP before they DNAT a flow
// to it (and a container address as they SNAT one), and none was. A
// runner, had one started, would wait in its stall (faultinject build).
// Once the IPs have had flows, the next holder's DEL does start one.
func TestADelOfIPsThatNeverHadAFlowStartsNoCleanUp(t *testing.T) {
	w := newWorld(t, "both")
	w.fillConntrack(10)
	a := w.add("a", extV4, extV6)
	fifo := stallFifo(t)
	stall := forget.StallEnv + "=" + fifo
	w.h.runWith(faultBinary(t), attach("DEL", a.id, w.pluginConf("1.0.0")), stall).mustOK(t, "DEL of a")
	if n := w.h.cleanUps(); n != 0 {
		t.Errorf("%d clean-up children after the DEL of IPs that never had a flow, want none", n)
	}
	b, c := w.add("b", extV4, extV6), w.add("c", extV4, extV6)
	serve(t, b.netns, "b", svPort)
	serve(t, c.netns, "c", svPort)
	w.flowsToBoth(b, c)
	w.h.runWith(faultBinary(t), attach("DEL", c.id, w.pluginConf("1.0.0")), stall).mustOK(t, "DEL of c")
	release := stalled(t, fifo) // fails unless a runner waits in its stall
	went := time.Now()
	release.Close()
	w.goneAfter(c, forget.Bound, went)
	w.kept(b)
}

// stallFifo makes the FIFO a faultinject clean-up stalls on
// (forget.StallEnv) until the test opens it for writing.
func stallFifo(t *testing.T) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "stall")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return fifo
}

// stalled waits for a clean-up to wait in its stall and returns the FIFO
// opened for writing: closing it lets the clean-up go on. Opening for
// writing without blocking succeeds only with a reader.
func stalled(t *testing.T, fifo string) *os.File {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		release, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return release
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("no conntrack clean-up is waiting in its stall: %v", err)
		}
	}
}

// stalledDel gives each holder of both external IPs with an hour-long flow to each
// (longFlows), then DELs the first with the faultinject build whose
// clean-up stalls, holding the runner lock, until stalled's FIFO is
// closed.
func (w *world) stalledDel(fifo string, cs []*container) {
	w.t.Helper()
	for i, c := range cs {
		w.longFlows(c, 40000+i)
	}
	w.h.runWith(faultBinary(w.t), attach("DEL", cs[0].id, w.pluginConf("1.0.0")), forget.StallEnv+"="+fifo).mustOK(w.t, "DEL of "+cs[0].id)
}

// K concurrent DELs on a node with conntrack entries start one clean-up
// runner per state directory, not K: while the first DEL's runner is
// stalled with the runner lock, the others (the faultinject build too,
// whose children would stall as well) queue their targets and start no
// child; once it goes on, the runner drains every target's entries within
// forget.Bound, and the remaining holder's stay.
func TestConcurrentDelsStartOneConntrackRunnerThatDrainsThemAll(t *testing.T) {
	w := newWorld(t, "both")
	var cs []*container
	for i := range 5 {
		cs = append(cs, w.add(fmt.Sprintf("g%d", i), extV4, extV6))
	}
	fifo := stallFifo(t)
	w.stalledDel(fifo, cs)
	stall := forget.StallEnv + "=" + fifo
	var wg sync.WaitGroup
	for _, c := range cs[1:4] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := w.h.runWith(faultBinary(t), attach("DEL", c.id, w.pluginConf("1.0.0")), stall); r.err != nil {
				t.Errorf("DEL of %s: %v: %s", c.id, r.err, r.stderr)
			}
		}()
	}
	wg.Wait()
	if n := w.h.cleanUps(); n != 1 {
		t.Errorf("%d conntrack clean-up children run after 4 DELs, want the one runner", n)
	}
	release := stalled(t, fifo)
	went := time.Now()
	release.Close()
	for _, c := range cs[:4] {
		w.goneAfter(c, forget.Bound, went)
	}
	w.kept(cs[4])
}

// A runner killed in its walk, before it deleted anything, loses nothing: its entries
// stay queued, and the next DEL's runner, finding the runner lock free,
// drains them with its own within the bound.
func TestAKilledConntrackRunnerLosesNothing(t *testing.T) {
	w := newWorld(t, "both")
	cs := []*container{w.add("a", extV4, extV6), w.add("b", extV4, extV6), w.add("c", extV4, extV6)}
	fifo := stallFifo(t)
	w.stalledDel(fifo, cs)
	// Before its stall's FIFO is opened, the runner has deleted nothing.
	if n := w.h.killCleanUps(); n != 1 {
		t.Fatalf("killed %d clean-up children, want the stalled runner", n)
	}
	del := time.Now()
	w.h.run(attach("DEL", cs[1].id, w.pluginConf("1.0.0"))).mustOK(t, "DEL of b")
	for _, c := range cs[:2] {
		w.goneAfter(c, forget.Bound, del)
	}
	w.kept(cs[2])
}

// A conntrack fault (the kernel refuses) neither fails the DEL nor any
// later ADD or DEL, all through libcni as a runtime calls them; status and
// CHECK report it; GC retries it and, with conntrack working again,
// deletes the gone target's entries.
func TestAConntrackFaultFailsNoChangeAndGCRetriesIt(t *testing.T) {
	w := newWorld(t, "both")
	dir := t.TempDir()
	if err := os.Symlink(faultBinary(t), filepath.Join(dir, "external-ip")); err != nil {
		t.Fatal(err)
	}
	w.cni = libcni.NewCNIConfigWithCacheDir([]string{exampleTools(t), dir}, t.TempDir(), nil)
	a, b := w.twoHoldersWithFlows()
	w.longFlows(b, 40000)
	t.Setenv(steer.ConntrackFaultEnv, "1")
	w.del(b)
	var drift string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !strings.Contains(drift, "not permitted"); time.Sleep(20 * time.Millisecond) {
		drift = ""
		for _, r := range w.h.status() {
			drift += strings.Join(r.Drift, "\n")
		}
	}
	if !strings.Contains(drift, "conntrack") || !strings.Contains(drift, "not permitted") {
		t.Fatalf("status drift %q, want the failed conntrack clean-up with its error", drift)
	}
	if err := w.check(a); err == nil || !strings.Contains(err.Error(), "conntrack") {
		t.Errorf("CHECK of a with b's flows not deleted: %v, want drift naming conntrack", err)
	}
	c := w.add("c", extV4, extV6) // not wedged, conntrack still refusing
	serve(t, c.netns, "c", svPort)
	w.flowsToBoth(a, c)
	w.del(c)
	families(t, func(t *testing.T, ext, lan string, addr func(*container) string) {
		if w.conntrackTo(ext, addr(b)) == "" {
			t.Fatalf("b's flows to %s are gone though conntrack refused", ext)
		}
	})
	os.Unsetenv(steer.ConntrackFaultEnv)
	gc := w.pluginConf("1.1.0")
	gc["cni.dev/valid-attachments"] = []map[string]string{{"containerID": a.id, "ifname": "eth0"}}
	retried := time.Now()
	w.h.run(call{command: "GC", conf: gc}).mustOK(t, "GC")
	w.goneAfter(b, 0, retried) // GC runs the clean-up before it returns
	w.goneAfter(c, 0, retried)
	if err := w.check(a); err != nil {
		t.Errorf("CHECK of a after GC's retry: %v", err)
	}
}

// After `nft flush ruleset` the sets that record which IPs had flows are
// gone with the table: the DEL that makes the table anew must still
// clean up the flows DNATed to what leaves, whether or not its holder
// was the IP's last (docs/conntrack.md: what the rules could not have
// seen is never taken for nothing).
func TestADelAfterAFlushedRulesetStillCleansUpTheLeavingFlows(t *testing.T) {
	for _, last := range []bool{false, true} {
		t.Run(fmt.Sprintf("last holder %v", last), func(t *testing.T) {
			w := newWorld(t, "both")
			a, b := w.twoHoldersWithFlows()
			gone := b
			if last {
				w.del(a) // b is the IPs' last holder, with flows of its own
			}
			w.longFlows(gone, 40001)
			w.h.nft("flush ruleset")
			w.del(gone)
			w.goneAfter(gone, forget.Bound, time.Now())
		})
	}
}
