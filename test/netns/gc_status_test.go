package netns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// gcConf is a GC request for network name keeping the given containers
// (interface eth0). valid == nil sends no valid-attachments key at all.
func (h *host) gcConf(name string, valid []string, extra map[string]any) map[string]any {
	conf := h.netConf("1.1.0", extra)
	conf["name"] = name
	delete(conf, "prevResult")
	if valid != nil {
		list := []map[string]string{}
		for _, id := range valid {
			list = append(list, map[string]string{"containerID": id, "ifname": "eth0"})
		}
		conf["cni.dev/valid-attachments"] = list
	}
	return conf
}

func (h *host) addOn(network, id string, ips ...string) {
	h.t.Helper()
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs(ips...)})
	conf["name"] = network
	h.run(call{command: "ADD", containerID: id, ifName: "eth0", netns: "/var/run/netns/" + id, conf: conf}).mustOK(h.t, "ADD "+network+"/"+id)
}

func TestGCDropsOnlyThisNetworksUnlistedAttachments(t *testing.T) {
	for _, form := range []struct {
		name  string
		valid []string
		raw   any // what valid-attachments is sent as, when not a list
	}{
		{name: "absent"},
		{name: "null", raw: nil},
		{name: "empty", valid: []string{}},
		{name: "listed", valid: []string{"keep"}},
	} {
		t.Run(form.name, func(t *testing.T) {
			h := newHost(t)
			h.addOn("net-a", "keep", "192.0.2.10")
			h.addOn("net-a", "gone", "192.0.2.11", "192.0.2.12")
			h.addOn("net-b", "other", "192.0.2.12")
			conf := h.gcConf("net-a", form.valid, nil)
			if form.name == "null" {
				conf["cni.dev/valid-attachments"] = form.raw
			}
			h.run(call{command: "GC", conf: conf}).mustOK(t, "GC net-a")
			if h.holderHas("eip0", "192.0.2.11") {
				t.Fatal("GC kept 192.0.2.11, held only by an unlisted attachment of net-a")
			}
			if !h.holderHas("eip0", "192.0.2.12") {
				t.Fatal("GC removed 192.0.2.12, which net-b still holds")
			}
			kept := form.name == "listed"
			if h.holderHas("eip0", "192.0.2.10") != kept {
				t.Fatalf("valid-attachments %s: 192.0.2.10 on eip0 = %v, want %v", form.name, !kept, kept)
			}
			h.consistent("after GC")
		})
	}
}

func TestGCRestoresMissingAddressesAndRemovesStrayOnes(t *testing.T) {
	h := newHost(t)
	h.addOn("net-a", "a", "192.0.2.10", "2001:db8:1::10")
	h.inNode("ip addr del 192.0.2.10/32 dev eip0")
	h.inNode("ip addr add 192.0.2.99/32 dev eip0")
	h.run(call{command: "GC", conf: h.gcConf("net-a", []string{"a"}, nil)}).mustOK(t, "GC")
	if !h.holderHas("eip0", "192.0.2.10") {
		t.Fatal("GC did not put back 192.0.2.10, held by a but removed by hand")
	}
	if h.holderHas("eip0", "192.0.2.99") {
		t.Fatal("GC left 192.0.2.99 on eip0, though no record holds it")
	}
	if !h.holderHas("eip0", "2001:db8:1::10") {
		t.Fatal("GC removed 2001:db8:1::10, which a holds")
	}
	h.consistent("after GC")
}

func TestGCWithoutStateChangesNothing(t *testing.T) {
	h := newHost(t)
	h.run(call{command: "GC", conf: h.gcConf("net-a", nil, nil)}).mustOK(t, "GC with no state")
	if h.deviceExists("eip0") {
		t.Fatal("GC with no state created eip0")
	}
	if entries, _ := os.ReadDir(h.dataDir); len(entries) != 0 {
		t.Fatalf("GC with no state wrote %d entries in dataDir", len(entries))
	}
}

func TestStatusSucceedsWhenAddCanWork(t *testing.T) {
	h := newHost(t)
	conf := h.gcConf("net-a", nil, map[string]any{"uplink": "uplink0"})
	h.run(call{command: "STATUS", conf: conf}).mustOK(t, "STATUS")
}

func TestStatusFailsWithCode50AndTheReason(t *testing.T) {
	cases := []struct {
		name  string
		setup func(h *host) map[string]any
		want  string
	}{
		{"arp_ignore on the uplink", func(h *host) map[string]any {
			h.inNode("sysctl -qw net.ipv4.conf.uplink0.arp_ignore=1")
			return map[string]any{"uplink": "uplink0"}
		}, "arp_ignore"},
		{"arp_ignore on all", func(h *host) map[string]any {
			h.inNode("sysctl -qw net.ipv4.conf.all.arp_ignore=2")
			return map[string]any{"uplink": "uplink0"}
		}, "net.ipv4.conf.all.arp_ignore"},
		{"IPv6 forwarding off for an IPv6 network", func(h *host) map[string]any {
			h.inNode("sysctl -qw net.ipv6.conf.uplink0.forwarding=0")
			return map[string]any{"uplink": "uplink0", "allowedRanges": []string{subnet6}}
		}, "forwarding"},
		{"holder device not ours", func(h *host) map[string]any {
			return map[string]any{"device": "uplink0"}
		}, "uplink0"},
		{"state directory not writable", func(h *host) map[string]any {
			blocker := filepath.Join(h.dataDir, "file")
			os.WriteFile(blocker, nil, 0o600)
			return map[string]any{"dataDir": blocker}
		}, "file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			conf := h.gcConf("net-a", nil, c.setup(h))
			h.run(call{command: "STATUS", conf: conf}).mustFail(t, "STATUS", 50, c.want)
		})
	}
}

// A cluster pool whose spec.hold is not the config's hold makes ADDs hold
// its IPs that other way: STATUS checks that the LAN can reach them, for
// the pool's families, as the node process publishes them.
func TestStatusChecksTheHoldOfTheClustersPoolsThatHoldOtherwise(t *testing.T) {
	h := newHost(t)
	publish := func(held ...nodeapi.HeldPool) {
		t.Helper()
		p := nodeapi.Pools{Names: []string{"plain"}, Held: held}
		for _, hp := range held {
			p.Names = append(p.Names, hp.Name)
		}
		if err := nodeapi.Publish(h.dataDir, p); err != nil {
			t.Fatal(err)
		}
	}
	h.inNode("sysctl -qw net.ipv4.conf.uplink0.forwarding=0")
	address := h.gcConf("net-a", nil, map[string]any{"uplink": "uplink0", "hold": "address"})
	h.run(call{command: "STATUS", conf: address}).mustOK(t, "STATUS held as addresses, without IPv4 forwarding")
	publish()
	h.run(call{command: "STATUS", conf: address}).mustOK(t, "STATUS with a pool that says no hold")
	publish(nodeapi.HeldPool{Name: "v6", Hold: "route", IPv6: true})
	h.run(call{command: "STATUS", conf: address}).mustOK(t, "STATUS with an IPv6 pool held as routes (IPv6 forwarding on)")
	publish(nodeapi.HeldPool{Name: "edge", Hold: "route", IPv4: true})
	h.run(call{command: "STATUS", conf: address}).mustFail(t, "STATUS with an IPv4 pool held as routes, without IPv4 forwarding",
		50, "pool edge", "hold route", "net.ipv4.conf.uplink0.forwarding")
	h.inNode("sysctl -qw net.ipv4.conf.uplink0.forwarding=1")
	h.run(call{command: "STATUS", conf: address}).mustOK(t, "STATUS once IPv4 forwarding is on")

	h.inNode("sysctl -qw net.ipv4.conf.uplink0.arp_ignore=1")
	route := h.gcConf("net-a", nil, map[string]any{"uplink": "uplink0", "hold": "route"})
	h.run(call{command: "STATUS", conf: route}).mustOK(t, "STATUS held as routes, the same pool held as routes, arp_ignore 1")
	publish(nodeapi.HeldPool{Name: "edge", Hold: "route", IPv4: true}, nodeapi.HeldPool{Name: "lan", Hold: "address", IPv4: true, IPv6: true})
	h.run(call{command: "STATUS", conf: route}).mustFail(t, "STATUS with a pool held as addresses, arp_ignore 1",
		50, "pool lan", "hold address", "arp_ignore")
}

func TestCorruptStateIsNamedWithCode5AndRepairRecovers(t *testing.T) {
	h := newHost(t)
	h.addOn("net-a", "a", "192.0.2.10")
	h.addOn("net-a", "b", "192.0.2.11")
	index := filepath.Join(h.dataDir, "eip0", "ip", "192.0.2.10.json")
	if err := os.WriteFile(index, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := h.inNode("ip -o addr show dev eip0")
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	conf["name"] = "net-a"
	h.run(call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}).mustFail(t, "DEL over a corrupt index", 5, index)
	h.run(call{command: "ADD", containerID: "c", ifName: "eth0", netns: "/var/run/netns/c", conf: conf}).mustFail(t, "ADD over a corrupt index", 5, index)
	if after := h.inNode("ip -o addr show dev eip0"); after != before {
		t.Fatalf("a failed call over corrupt state changed eip0:\nbefore %s\nafter  %s", before, after)
	}
	// The README's recovery: move the named file aside, run repair.
	if err := os.Rename(index, index+".bad"); err != nil {
		t.Fatal(err)
	}
	out := h.inNode("%s repair --data-dir %s", pluginBin, h.dataDir)
	if !strings.Contains(out, "eip0: repaired") || !strings.Contains(out, "eip0: fixed: 192.0.2.10: ") {
		t.Fatalf("repair printed %q; want the drift it fixed on 192.0.2.10, then eip0 repaired", out)
	}
	held := h.consistent("after repair")
	if held["192.0.2.10"] != 1 || held["192.0.2.11"] != 1 {
		t.Fatalf("after repair, holders are %v; want one each for .10 and .11", held)
	}
	h.run(call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}).mustOK(t, "DEL after repair")
	if h.holderHas("eip0", "192.0.2.10") {
		t.Fatal("DEL after repair left 192.0.2.10")
	}
}

func TestStateDirectoryRemovedIsReportedByCheckAndHealedByGC(t *testing.T) {
	h := newHost(t)
	h.addOn("net-a", "a", "192.0.2.10")
	if err := os.RemoveAll(filepath.Join(h.dataDir, "eip0")); err != nil {
		t.Fatal(err)
	}
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	conf["name"] = "net-a"
	h.run(call{command: "CHECK", containerID: "a", ifName: "eth0", netns: "/var/run/netns/a", conf: conf}).mustFail(t, "CHECK without state", 104, "no record")
	h.run(call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}).mustOK(t, "DEL without state")
	// With the state gone, the address has no holder: re-ADD and GC put
	// the holder and the state back in agreement.
	h.addOn("net-a", "a", "192.0.2.10")
	h.run(call{command: "GC", conf: h.gcConf("net-a", []string{"a"}, nil)}).mustOK(t, "GC")
	if held := h.consistent("after re-ADD and GC"); held["192.0.2.10"] != 1 {
		t.Fatalf("192.0.2.10 has %d holders, want 1", held["192.0.2.10"])
	}
}

func TestStatusCommandShowsHoldersAndDrift(t *testing.T) {
	h := newHost(t)
	h.addOn("net-a", "a", "192.0.2.10")
	h.addOn("net-a", "b", "192.0.2.10")
	out := h.inNode("%s status --data-dir %s", pluginBin, h.dataDir)
	for _, want := range []string{"holder eip0: up", "192.0.2.10", "2 holder(s)", "container a", "container b", "drift: none"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status output lacks %q:\n%s", want, out)
		}
	}
	h.inNode("ip addr del 192.0.2.10/32 dev eip0")
	out = h.inNode("%s status --data-dir %s", pluginBin, h.dataDir)
	if !strings.Contains(out, "192.0.2.10: held but not on eip0") {
		t.Fatalf("status does not report the address removed by hand:\n%s", out)
	}
}

// status and CHECK only read: with a part of the state directory missing
// there is no state to read, and neither makes the part again.
func TestStatusAndCheckMakeNothingInAnIncompleteStateDirectory(t *testing.T) {
	for _, part := range []string{"tmp", "att", "ip", "lock"} {
		t.Run(part, func(t *testing.T) {
			h := newHost(t)
			h.addOn("net-a", "a", "192.0.2.10")
			if err := os.RemoveAll(filepath.Join(h.dataDir, "eip0", part)); err != nil {
				t.Fatal(err)
			}
			before := h.settledView()
			// Only the records' own directories carry state; tmp/ and
			// the legacy lock file hide none.
			records := part == "tmp" || part == "lock"
			out := h.inNode("%s status --data-dir %s", pluginBin, h.dataDir)
			if held := strings.Contains(out, "192.0.2.10") && !strings.Contains(out, "no external IPs held"); held != records {
				t.Errorf("status without %s:\n%s\nwant 192.0.2.10 held: %v", part, out, records)
			}
			conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
			conf["name"] = "net-a"
			check := h.run(call{command: "CHECK", containerID: "a", ifName: "eth0", netns: "/var/run/netns/a", conf: conf})
			if records {
				check.mustOK(t, "CHECK without "+part)
			} else {
				check.mustFail(t, "CHECK without "+part, 104, "no record")
			}
			h.mustBeUnchanged(t, "status and CHECK without "+part, before)
		})
	}
}

// Two state directories (two holder devices) share table inet
// external-ip. With the other directory's holder down, its IPs are on no
// device: one directory's GC must still leave the other's rules alone.
func TestGCOfOneStateDirectoryKeepsAnotherDirectorysRulesWhileItsHolderIsDown(t *testing.T) {
	h := newHost(t)
	confA := h.steeredConfIn("1.1.0", "10.1.0.5/24", "fd00:1::5/64", "192.0.2.10")
	confB := h.steeredConfIn("1.1.0", "10.2.0.5/24", "fd00:2::5/64", "192.0.2.20")
	confB["dataDir"] = t.TempDir()
	confB["device"] = "eip1"
	confB["name"] = "othernet"
	h.run(attach("ADD", "a", confA)).mustOK(t, "ADD a")
	h.run(attach("ADD", "b", confB)).mustOK(t, "ADD b")
	h.run(attach("CHECK", "b", confB)).mustOK(t, "CHECK b before")
	h.sh("ip -n %s link set eip1 down", h.name)
	h.run(call{command: "GC", conf: h.gcConf("testnet", []string{"a"}, map[string]any{"traffic": "both"})}).mustOK(t, "GC of a's directory")
	// The link's going down took b's routes: CHECK of b fails on those
	// until b's own GC, whatever a's did. Its rules must be there.
	for _, m := range []struct{ set, want string }{{"dnat4", "192.0.2.20"}, {"snat4", "10.2.0.5"}} {
		if got := h.nft("list map inet external-ip %s", m.set); !strings.Contains(got, m.want) {
			t.Errorf("GC of a's directory removed b's rule for %s from %s (b's holder down):\n%s", m.want, m.set, got)
		}
	}
	h.sh("ip -n %s link set eip1 up", h.name)
	h.run(call{command: "GC", conf: h.gcConf("othernet", []string{"b"}, map[string]any{"traffic": "both", "dataDir": confB["dataDir"], "device": "eip1"})}).mustOK(t, "GC of b's directory")
	if r := h.run(attach("CHECK", "b", confB)); r.err != nil {
		t.Errorf("CHECK b after its own GC, its holder up again: code %d %s", r.code, r.msg)
	}
}

// A corrupt journal fails every ADD and DEL with code 5 until it is moved
// aside: STATUS, which says whether an ADD could work, fails naming it.
func TestStatusFailsWith50WhileACorruptJournalBlocksEveryAdd(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.1.0", map[string]any{"uplink": "uplink0", "runtimeConfig": runtimeIPs(sharedIP)})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	h.run(call{command: "STATUS", conf: conf}).mustOK(t, "STATUS with the state sound")
	journal := filepath.Join(h.dataDir, "eip0", "journal")
	if err := os.WriteFile(journal, []byte("{garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.run(attach("ADD", "c2", conf)).mustFail(t, "ADD beside a corrupt journal", 5, journal)
	h.run(call{command: "STATUS", conf: conf}).mustFail(t, "STATUS beside a corrupt journal", 50, journal)
	if err := os.Remove(journal); err != nil {
		t.Fatal(err)
	}
	h.run(call{command: "STATUS", conf: conf}).mustOK(t, "STATUS once the journal was moved aside")
}
