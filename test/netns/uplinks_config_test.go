package netns

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
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

// An uplinkRouting edited on a live node (a ConfigMap edit) moves the
// node's routing at the next call, an ADD or a GC alone: the old mark's
// rules and routes go, every routed uplink is routed and marked by the
// new ones, and the pods ADDed before are still answered. The ADD used to
// re-mark the chains with the new mark but make no rule for it, cutting
// every routed pod's replies, and the old rules and table outlived every
// DEL; the GC refused to rewrite the chains.
func TestAnEditedUplinkRoutingMovesTheNodesRulesAndKeepsEveryPodAnswered(t *testing.T) {
	for _, next := range []string{"ADD", "GC"} {
		t.Run(next, func(t *testing.T) {
			u := newTwoUplinks(t, uplinkOpts{})
			before := u.policy()
			a := u.add("a", eip4, eip6)
			serve(t, a.netns, "a", svPort)
			u.answered("after A's ADD with the defaults", a)
			u.editEntry("uplinkRouting", edited)
			pods := []*container{a}
			if next == "ADD" {
				b := u.add("b", eip4b)
				serve(t, b.netns, "b", svPort)
				if err := u.check(b); err != nil {
					t.Errorf("CHECK B after its ADD with the edited entry: %v", err)
				}
				mustAsk(t, "the client after B's ADD", nsPath(u.client), "tcp", eip4b, svPort, "b", cliV4)
				pods = append(pods, b)
			} else {
				u.gc(a)
			}
			when := "after the " + next + " with the edited entry"
			u.answered(when, a)
			u.defaultRules(when)
			if rules := u.h.inNode("ip rule"); !strings.Contains(rules, "5001:\tfrom all fwmark 0x100000/0xf00000 lookup 5001 proto 225") {
				t.Errorf("%s no rule of its mark at 5001:\n%s", when, rules)
			}
			u.gc(pods...)
			u.answered("after a GC", a)
			for _, c := range pods {
				u.del(c)
			}
			u.noneOfOursLeft("after the last DEL", before)
		})
	}
}

// editEntry sets key in external-ip's entry of the world's list, the
// bridge's and its IPAM's state kept, as an edited ConfigMap does.
func (w *world) editEntry(key string, value any) {
	w.t.Helper()
	var conf map[string]any
	if err := json.Unmarshal(w.list.Bytes, &conf); err != nil {
		w.t.Fatal(err)
	}
	plugins := conf["plugins"].([]any)
	plugins[len(plugins)-1].(map[string]any)[key] = value
	b, _ := json.Marshal(conf)
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		w.t.Fatal(err)
	}
	w.list = list
}
