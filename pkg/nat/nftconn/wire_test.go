package nftconn

import (
	"encoding/binary"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// CountRules counts a rule as tagged only by its exact user data: a rule
// without any (nat's layout 1), or commented otherwise, is not.
func TestARuleIsTaggedOnlyWithItsExactUserData(t *testing.T) {
	tag := userdata.AppendString(nil, userdata.TypeComment, "external-ip layout 5")
	c := &Conn{table: "external-ip"}
	e, err := expr.Marshal(byte(unix.NFPROTO_INET), &expr.Counter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		udata []byte
		want  bool
	}{
		{"the tag", tag, true},
		{"no user data", nil, false},
		{"an earlier layout's tag", userdata.AppendString(nil, userdata.TypeComment, "external-ip layout 1"), false},
		{"a person's comment", userdata.AppendString(nil, userdata.TypeComment, "added by hand"), false},
	} {
		m := c.newRule("prerouting", [][]byte{e}, tc.udata)
		chain, tagged, ok := ruleChainAndTag(m.Data, tag)
		if !ok || chain != "prerouting" || tagged != tc.want {
			t.Errorf("a rule with %s reads as chain %q (ok %v), tagged %v; want prerouting, tagged %v", tc.what, chain, ok, tagged, tc.want)
		}
	}
}

func TestGotoChainParsesOnlyAGotoVerdict(t *testing.T) {
	verdict := func(code int32, chain string) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.Uint32(unix.NFTA_VERDICT_CODE, uint32(code))
		if chain != "" {
			ae.String(unix.NFTA_VERDICT_CHAIN, chain)
		}
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := GotoChain(verdict(unix.NFT_GOTO, "to-192.0.2.10")); got != "to-192.0.2.10" {
		t.Errorf("goto verdict parsed as %q", got)
	}
	if got := GotoChain(verdict(unix.NFT_JUMP, "to-192.0.2.10")); got != "" {
		t.Errorf("jump verdict parsed as goto %q", got)
	}
	if got := GotoChain([]byte{1, 2, 3}); got != "" {
		t.Errorf("garbage parsed as %q", got)
	}
}
