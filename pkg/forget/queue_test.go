package forget

import (
	"net/netip"
	"testing"
)

var (
	v4a    = netip.MustParseAddr("198.51.100.1")
	v4b    = netip.MustParseAddr("198.51.100.2")
	target = netip.MustParseAddr("10.88.0.6")
)

func TestMergeForgetsKeepsEachPairOnceAtItsLatestTime(t *testing.T) {
	old := Entry{IP: v4a, Target: target, Error: "failed", Tries: 2}
	other := Entry{IP: v4b}
	again := Entry{IP: v4a, Target: target}
	again.Since = old.Since.Add(1)
	got := mergeForgets([]Entry{old, other}, []Entry{again})
	if len(got) != 2 || got[0] != again || got[1] != other {
		t.Errorf("merged %+v, want the pair moved to its new time, error cleared, and the other kept", got)
	}
}
