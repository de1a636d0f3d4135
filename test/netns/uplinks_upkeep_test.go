package netns

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The node upkeep (`external-ip install --watch --repair-every`) repairs
// the uplink routing too: a rule and a table route of ours deleted by
// hand come back within one repair period (plus the repair's own time).
func TestTheNodeUpkeepPutsBackADeletedUplinkRuleAndRouteWithinARepairPeriod(t *testing.T) {
	const period, slack = time.Second, 3 * time.Second
	u := newTwoUplinks(t, uplinkOpts{})
	a := u.add("a", eip4, eip6)
	serve(t, a.netns, "a", svPort)
	entry := map[string]any{"type": "external-ip", "dataDir": u.h.dataDir, "allowedRanges": []string{eipNet4, eipNet6}}
	logs := u.h.startWatch(t, pluginBin, entry, "--repair-every", period.String())
	u.h.eventually(t, 20*time.Second, "the upkeep starting", func() bool {
		b, _ := os.ReadFile(logs)
		return strings.Contains(string(b), `"msg":"starting"`)
	})
	u.h.inNode("ip rule del pref %s", ourRulePrio)
	u.h.inNode("ip -6 route del default table %s", ourFirstTable)
	u.h.eventually(t, period+slack, "our IPv4 rule and IPv6 table route back", func() bool {
		return strings.Contains(u.h.inNode("ip rule"), ourRulePrio+":") &&
			strings.Contains(u.h.inNode("ip -6 route show table %s", ourFirstTable), "default via "+gwV6)
	})
	u.answered("after the upkeep's repair", a)
	if b, _ := os.ReadFile(logs); !strings.Contains(string(b), "no rule pref "+ourRulePrio) {
		t.Errorf("the upkeep's log does not name the rule it repaired:\n%s", b)
	}
}

// The node process follows a reloaded plugin entry (a ConfigMap edited
// under a running DaemonSet): the upkeep works on the new entry's dataDir,
// with its mark, tables, priorities and gateways, from the reload on. It
// used to keep the entry it started with: repairing a dataDir no plugin
// used, putting a dead gateway back, and fighting the plugin over the
// uplink chain's mark.
func TestTheNodeUpkeepFollowsAReloadedEntrysDataDirGatewaysAndMark(t *testing.T) {
	const period, slack = time.Second, 3 * time.Second
	routing := map[string]any{"mark": "0x00f00000", "table": 5240, "priority": 5240,
		"gateways": map[string]any{"uplink1": []string{gwV4, gwV6}}}
	u := newTwoUplinks(t, uplinkOpts{noDefault: true, conf: map[string]any{"uplinkRouting": routing}})
	old := map[string]any{"type": "external-ip", "dataDir": filepath.Join(t.TempDir(), "old"), "allowedRanges": []string{eipNet4, eipNet6},
		"uplinkRouting": map[string]any{"gateways": map[string]any{"uplink1": []string{"198.51.100.253", "2001:db8:2::fd"}}}}
	logs := u.h.startWatch(t, pluginBin, old, "--repair-every", period.String())
	logged := func(s string) func() bool {
		return func() bool { b, _ := os.ReadFile(logs); return strings.Contains(string(b), s) }
	}
	u.h.eventually(t, 20*time.Second, "the upkeep starting", logged(`"msg":"starting"`))

	next := map[string]any{"type": "external-ip", "dataDir": u.h.dataDir, "allowedRanges": []string{eipNet4, eipNet6}, "uplinkRouting": routing}
	reloaded := time.Now()
	writeEntry(t, filepath.Join(filepath.Dir(logs), "entry.json"), next)
	// The goal is one period; the bound leaves a loaded machine room, and
	// the figure is printed.
	u.h.eventually(t, period+slack, "the upkeep following the new entry", logged(`"dataDir":"`+u.h.dataDir+`"`))
	t.Logf("the upkeep followed the new entry %s after it was written (goal: within the period, %s)", time.Since(reloaded).Round(time.Millisecond), period)

	a := u.add("a", eip4, eip6)
	serve(t, a.netns, "a", svPort)
	u.h.inNode("ip rule del pref 5241")
	u.h.inNode("ip -6 route del default table 5241")
	repaired := time.Now()
	u.h.eventually(t, period+slack, "our IPv4 rule (the new mark) and IPv6 table route (the new gateway) back", func() bool {
		return strings.Contains(u.h.inNode("ip rule"), "5241:\tfrom all fwmark 0x100000/0xf00000 lookup 5241") &&
			strings.Contains(u.h.inNode("ip -6 route show table 5241"), "default via "+gwV6)
	})
	t.Logf("repaired %s after the deletion, with a repair period of %s", time.Since(repaired).Round(time.Millisecond), period)
	u.answered("after the upkeep's repair", a)
	u.defaultRules("after the upkeep's repair with the reloaded entry")
	time.Sleep(3 * period)
	b, _ := os.ReadFile(logs)
	if n := strings.Count(string(b), `"msg":"repaired drift"`); n != 1 {
		t.Errorf("the upkeep repaired %d times; want once, the deletion (more is a fight with the plugin over the entry):\n%s", n, b)
	}
	for _, dead := range []string{"198.51.100.253", "2001:db8:2::fd"} {
		if out := u.h.inNode("sh -c 'ip route show table all; ip -6 route show table all'"); strings.Contains(out, dead) {
			t.Errorf("the old entry's gateway %s is in a route:\n%s", dead, out)
		}
	}
}

// writeEntry replaces a plugin entry file as kubelet updates a ConfigMap's:
// written beside it, then renamed over it.
func writeEntry(t *testing.T, path string, entry map[string]any) {
	t.Helper()
	b, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
