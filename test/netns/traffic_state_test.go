package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// steeredConf is a steered network config whose prevResult gives the
// container v4/24 and v6/64 as its own addresses, so that every container
// of a test is a distinct target.
func (h *host) steeredConf(cniVersion, v4, v6 string, ips ...string) map[string]any {
	h.t.Helper()
	return h.steeredConfIn(cniVersion, v4+"/24", v6+"/64", ips...)
}

// steeredConfIn is steeredConf with the container's subnets given: v4
// and v6 are an address with its prefix length, as prevResult has them.
func (h *host) steeredConfIn(cniVersion, v4, v6 string, ips ...string) map[string]any {
	h.t.Helper()
	p4, p6 := netip.MustParsePrefix(v4), netip.MustParsePrefix(v6)
	idx := 0
	r := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: "eth0", Sandbox: "/var/run/netns/x"}},
		IPs: []*types100.IPConfig{
			{Interface: &idx, Address: net.IPNet{IP: p4.Addr().AsSlice(), Mask: net.CIDRMask(p4.Bits(), 32)}},
			{Interface: &idx, Address: net.IPNet{IP: p6.Addr().AsSlice(), Mask: net.CIDRMask(p6.Bits(), 128)}},
		},
	}
	conv, err := r.GetAsVersion(cniVersion)
	if err != nil {
		h.t.Fatal(err)
	}
	b, _ := json.Marshal(conv)
	var pr map[string]any
	json.Unmarshal(b, &pr)
	h.forwardIPv4()
	return h.netConf(cniVersion, map[string]any{"traffic": "both", "prevResult": pr, "runtimeConfig": runtimeIPs(ips...)})
}

// steeredStatus is the part of `external-ip status --json` about steering.
type steeredStatus struct {
	IPs []struct {
		IP      string   `json:"ip"`
		Targets []string `json:"targets"`
	} `json:"ips"`
	Drift []string `json:"drift"`
}

// targets reads each IP's ingress targets from status, failing on drift.
func (h *host) targets(when string) map[string][]string {
	h.t.Helper()
	out := h.inNode("%s status --json --data-dir %s", pluginBin, h.dataDir)
	var reps []steeredStatus
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		h.t.Fatalf("status --json printed %q: %v", out, err)
	}
	got := map[string][]string{}
	for _, r := range reps {
		if len(r.Drift) > 0 {
			h.t.Fatalf("%s: drift: %v", when, r.Drift)
		}
		for _, ip := range r.IPs {
			got[ip.IP] = ip.Targets
		}
	}
	return got
}

// recordPath is the attachment record of (network, id, eth0), named as
// package assigner names it.
func (h *host) recordPath(network, id string) string {
	sum := sha256.Sum256([]byte(network + "\x00" + id + "\x00eth0"))
	return filepath.Join(h.dataDir, "eip0", "att", hex.EncodeToString(sum[:16])+".json")
}

func (h *host) nft(format string, args ...any) string {
	h.t.Helper()
	return h.sh("ip netns exec %s nft "+format, append([]any{h.name}, args...)...)
}

var steerAddSteps = append(slices.Clone(addSteps), "nat")

func TestSteeredAddKilledAtAnyStepLeavesTheTableAsTheRecordsSay(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range steerAddSteps {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			if step != "device" {
				h.run(attach("ADD", "b", h.steeredConf("1.0.0", "10.1.0.6", "fd00:1::6", "192.0.2.10"))).mustOK(t, "ADD b")
			}
			r := h.runWith(bin, attach("ADD", "a", h.steeredConf("1.0.0", "10.1.0.5", "fd00:1::5", "192.0.2.10", "2001:db8:1::10")), "EXTERNAL_IP_CRASH_AT="+step)
			if r.err == nil {
				t.Fatalf("ADD a was not killed at step %q", step)
			}
			h.run(attach("ADD", "c", h.steeredConf("1.0.0", "10.1.0.7", "fd00:1::7", "192.0.2.20"))).mustOK(t, "ADD c")
			got := h.targets("after the next ADD")
			if want := map[bool][]string{true: nil, false: {"10.1.0.6"}}[step == "device"]; !slices.Equal(got["192.0.2.10"], want) {
				t.Fatalf("after the killed ADD was rolled back, 192.0.2.10 goes to %v, want %v", got["192.0.2.10"], want)
			}
			h.run(attach("DEL", "a", h.netConf("1.0.0", nil))).mustOK(t, "DEL a")
			for _, id := range []string{"b", "c"} {
				h.run(attach("DEL", id, h.netConf("1.0.0", nil))).mustOK(t, "DEL "+id)
			}
			h.targets("after every DEL")
			// A DEL's detached clean-up takes the IP out of the seen sets
			// after the DEL returns: wait for it before reading them.
			h.waitNoCleanUp(10 * time.Second)
			// The hairpin subnet 10.1.0.0/24 may stay, for GC (it steers nothing).
			out := h.nft("list table inet external-ip")
			if strings.Contains(out, "192.0.2.") || slices.ContainsFunc([]string{"10.1.0.5", "10.1.0.6", "10.1.0.7"}, func(a string) bool { return strings.Contains(out, a) }) {
				t.Fatalf("after every DEL the table still steers:\n%s", out)
			}
		})
	}
}

func TestSteeredDelKilledAtAnyStepIsFinishedByTheRetriedDel(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range append(slices.Clone(delSteps), "nat") {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			h.run(attach("ADD", "a", h.steeredConf("1.0.0", "10.1.0.5", "fd00:1::5", "192.0.2.10", "2001:db8:1::10"))).mustOK(t, "ADD a")
			h.run(attach("ADD", "b", h.steeredConf("1.0.0", "10.1.0.6", "fd00:1::6", "192.0.2.10"))).mustOK(t, "ADD b")
			if r := h.runWith(bin, attach("DEL", "a", h.netConf("1.0.0", nil)), "EXTERNAL_IP_CRASH_AT="+step); r.err == nil {
				t.Fatalf("DEL a was not killed at step %q", step)
			}
			h.run(attach("DEL", "a", h.netConf("1.0.0", nil))).mustOK(t, "retried DEL a")
			got := h.targets("after the retried DEL")
			if !slices.Equal(got["192.0.2.10"], []string{"10.1.0.6"}) {
				t.Fatalf("192.0.2.10 goes to %v, want only b's 10.1.0.6", got["192.0.2.10"])
			}
			if out := h.nft("list table inet external-ip"); strings.Contains(out, "10.1.0.5") || strings.Contains(out, "2001:db8:1::10") {
				t.Fatalf("a's rules outlived its DEL:\n%s", out)
			}
		})
	}
}

func TestCheckFailsWhenARuleIsMissingOrPointsElsewhereAndGCRestoresIt(t *testing.T) {
	h := newHost(t)
	conf := h.steeredConf("1.1.0", "10.1.0.5", "fd00:1::5", "192.0.2.10", "2001:db8:1::10")
	h.run(attach("ADD", "a", conf)).mustOK(t, "ADD a")
	h.run(attach("CHECK", "a", conf)).mustOK(t, "CHECK right after ADD")
	gc := h.gcConf("testnet", []string{"a"}, map[string]any{"traffic": "both"})
	for _, c := range []struct{ what, cmd, names string }{
		{"ingress element removed", "delete element inet external-ip dnat4 { 192.0.2.10 }", "192.0.2.10"},
		{"ingress pointing elsewhere", "delete element inet external-ip dnat6 { 2001:db8:1::10 } ; add element inet external-ip dnat6 { 2001:db8:1::10 : fd00:1::99 }", "2001:db8:1::10"},
		{"egress element removed", "delete element inet external-ip snat4 { 10.1.0.5 . \"uplink0\" }", "10.1.0.5"},
		{"hairpin element removed", "delete element inet external-ip hp6 { fd00:1::/64 . fd00:1::/64 }", "fd00:1::5"},
		{"base chain flushed", "flush chain inet external-ip prerouting", "prerouting"},
	} {
		h.nft("'%s'", c.cmd)
		h.run(attach("CHECK", "a", conf)).mustFail(t, "CHECK after "+c.what, codeDrift, c.names)
		h.run(call{command: "GC", conf: gc}).mustOK(t, "GC after "+c.what)
		h.run(attach("CHECK", "a", conf)).mustOK(t, "CHECK after GC repaired "+c.what)
	}
	if got := h.targets("after the repairs"); !slices.Equal(got["192.0.2.10"], []string{"10.1.0.5"}) {
		t.Fatalf("192.0.2.10 goes to %v after the repairs", got["192.0.2.10"])
	}
}

func TestRepairRemovesTheRulesOfAGoneAttachment(t *testing.T) {
	h := newHost(t)
	h.run(attach("ADD", "a", h.steeredConf("1.0.0", "10.1.0.5", "fd00:1::5", "192.0.2.10"))).mustOK(t, "ADD a")
	h.run(attach("ADD", "b", h.steeredConf("1.0.0", "10.1.0.6", "fd00:1::6", "192.0.2.11"))).mustOK(t, "ADD b")
	// b's record vanishes (moved aside by an operator): its rules are stale.
	h.sh("rm %s", h.recordPath("testnet", "b"))
	h.inNode("%s repair --data-dir %s", pluginBin, h.dataDir)
	out := h.nft("list table inet external-ip")
	if strings.Contains(out, "192.0.2.11") || strings.Contains(out, "10.1.0.6") {
		t.Fatalf("repair left the gone attachment's rules:\n%s", out)
	}
	if !strings.Contains(out, "192.0.2.10 : 10.1.0.5") {
		t.Fatalf("repair lost a's rule:\n%s", out)
	}
}

// STATUS runs the real nf_tables probe: the plugin, started without
// CAP_NET_ADMIN (setpriv drops it from the bounding and inheritable sets,
// so the exec'd binary cannot hold it), can make no nf_tables change and
// must say so with code 50. With traffic "none" the same process is ready:
// the failure is the probe's, not another check's.
func TestStatusFailsWithCode50WhenNftablesCannotBeUsed(t *testing.T) {
	h := newHost(t)
	wrapper := filepath.Join(t.TempDir(), "external-ip-no-net-admin")
	script := "#!/bin/sh\nexec setpriv --bounding-set -net_admin --inh-caps -net_admin " + pluginBin + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h.forwardIPv4()
	conf := h.gcConf("net-a", nil, map[string]any{"uplink": "uplink0", "traffic": "both"})
	h.runWith(wrapper, call{command: "STATUS", conf: conf}).mustFail(t, "STATUS without CAP_NET_ADMIN", 50, "nf_tables")
	none := h.gcConf("net-a", nil, map[string]any{"uplink": "uplink0", "traffic": "none"})
	h.runWith(wrapper, call{command: "STATUS", conf: none}).mustOK(t, "STATUS without CAP_NET_ADMIN, traffic none")
	h.run(call{command: "STATUS", conf: conf}).mustOK(t, "STATUS with CAP_NET_ADMIN")
}
