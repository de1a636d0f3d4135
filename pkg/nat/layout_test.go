package nat

import (
	"testing"
)

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
