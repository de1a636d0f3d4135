package netns

import (
	"strings"
	"testing"
)

// edited is an uplinkRouting of another mark, tables and priorities than
// the defaults: 5000 (suppress) and 5001 (mark 0x00100000, table 5001).
var edited = map[string]any{"mark": "0x00f00000", "table": 5000, "priority": 5000}

// defaultRules fails the test if a rule at the default priorities is in
// the node: the edited entry's node must have none.
func (u *twoUplinks) defaultRules(when string) {
	u.t.Helper()
	for _, ip := range []string{"ip", "ip -6"} {
		for _, l := range strings.Split(u.h.inNode("%s rule", ip), "\n") {
			if strings.HasPrefix(l, ourSuppressPri+":") || strings.HasPrefix(l, ourRulePrio+":") {
				u.t.Errorf("%s `%s rule` has a rule at the default priorities: %q", when, ip, l)
			}
		}
	}
}

// `external-ip repair` and `status` have no network config: they take
// the node's uplinkRouting from its record, not the defaults. With the
// defaults, repair re-marked the uplink's chain with the default mark,
// which no rule matched: the replies left by the default route, and
// rules 4240 and 4241 and table 4241 stayed past the last DEL.
func TestRepairAndStatusKeepTheUplinkRoutingOfAnEntryThatIsNotTheDefault(t *testing.T) {
	u := newTwoUplinks(t, uplinkOpts{conf: map[string]any{"uplinkRouting": edited}})
	before := u.policy()
	a := u.add("a", eip4, eip6)
	serve(t, a.netns, "a", svPort)
	u.answered("after the ADD", a)
	for _, r := range u.h.status() {
		if len(r.Drift) > 0 {
			t.Errorf("status of %s names drift on a node routed as its entry says: %q", r.Device, r.Drift)
		}
	}
	if out := u.h.inNode("%s repair --data-dir %s", pluginBin, u.h.dataDir); strings.Contains(out, "fixed") {
		t.Errorf("repair fixed a node routed as its entry says:\n%s", out)
	}
	u.answered("after repair", a)
	u.defaultRules("after repair")
	u.del(a)
	u.noneOfOursLeft("after the last DEL", before)
}
