package netns

import (
	"os"
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
