package assigner

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/traffic"
)

// GC makes the hairpin sets hold the widest subnets the records need: a
// widened subnet serves the narrower ones inside it, and once its last
// holder leaves, the narrower subnets come back in the same change.
func TestGCKeepsTheWidestHairpinSubnetsTheRecordsNeed(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, netip.MustParsePrefix("10.88.0.5/24"))
	f.add(attA, v4a)
	f.steered(n, traffic.Both, netip.MustParsePrefix("10.88.0.6/16"))
	f.add(attB, v4a)
	// Stray beside them: a subnet inside the /16, one no record has.
	n.st.Hairpin = append(n.st.Hairpin, netip.MustParsePrefix("10.88.1.0/25"), netip.MustParsePrefix("10.99.0.0/24"))
	gc := func(keep ...Attachment) string {
		t.Helper()
		if err := f.assigner().GC("net1", keep); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(n.st.Hairpin)
	}
	if got := gc(attA, attB); got != "[10.88.0.0/16]" {
		t.Errorf("with a /24 and the /16 around it held, GC left the hairpin sets %s, want the /16 alone", got)
	}
	if got := gc(attA); got != "[10.88.0.0/24]" {
		t.Errorf("once the /16's holder left, GC left the hairpin sets %s, want the /24 of the one left", got)
	}
	if got := gc(); got != "[]" {
		t.Errorf("with no record left, GC left the hairpin sets %s", got)
	}
}
