package nat

import (
	"testing"

	"github.com/google/nftables/userdata"
)

// ADD's check of the base chains counts a rule as this version's only by
// its layout tag: an untagged rule (layout 1, with the fib guard) or one
// commented otherwise is another layout's.
func TestARuleIsOfThisLayoutOnlyWithItsTag(t *testing.T) {
	for _, c := range []struct {
		what  string
		udata []byte
		want  bool
	}{
		{"this layout's tag", layoutData(), true},
		{"no user data (layout 1)", nil, false},
		{"an earlier layout's tag", userdata.AppendString(nil, userdata.TypeComment, "external-ip layout 1"), false},
		{"a person's comment", userdata.AppendString(nil, userdata.TypeComment, "added by hand"), false},
	} {
		m := newRule(chainPrerouting, marshalAll(ingressRule(ipv4)), c.udata)
		chain, tagged, ok := ruleChainAndTag(m.Data, layoutData())
		if !ok || chain != chainPrerouting || tagged != c.want {
			t.Errorf("a rule with %s reads as chain %q (ok %v), tagged %v; want %q, tagged %v", c.what, chain, ok, tagged, chainPrerouting, c.want)
		}
	}
}

// Each base chain's count, which ADD's check compares with the kernel's,
// is the number of rules Ensure puts there.
func TestBaseChainCountsAreTheirRules(t *testing.T) {
	for _, b := range baseChains(DefaultUplinkMask) {
		if int(b.count) != b.ruleCount() {
			t.Errorf("chain %s: count %d, but Ensure puts %d rules there", b.name, b.count, b.ruleCount())
		}
	}
}

// ruleCount is the number of rules Ensure puts in the chain, counted
// from the rules themselves (baseChain.count says it without them).
func (b baseChain) ruleCount() int {
	n := 0
	for _, f := range []family{ipv4, ipv6} {
		n += len(b.rules(f))
		if b.raw != nil {
			n++
		}
	}
	return n
}
