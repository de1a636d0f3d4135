package nat

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestIngressChainNamesRoundTripAndRefuseOthers(t *testing.T) {
	for _, s := range []string{"192.0.2.10", "2001:db8:1::10", "::ffff:1.2.3.4", "2001:db8::"} {
		ip := netip.MustParseAddr(s)
		got, ok := ingressChainIP(ingressChain(ip))
		if !ok || got != ip {
			t.Errorf("%s: chain %q reads back as %v (ok %v)", s, ingressChain(ip), got, ok)
		}
	}
	if n := ingressChain(netip.MustParseAddr("2001:db8::1")); n != "to-2001-db8--1" {
		t.Errorf("IPv6 chain name is %q, want colons as dashes", n)
	}
	for _, name := range []string{"prerouting", "to-", "to-x", "to-192.0.2.010", "to-2001:db8::1", "sp-192.0.2.1"} {
		if ip, ok := ingressChainIP(name); ok {
			t.Errorf("chain %q taken for an external IP's (%s)", name, ip)
		}
	}
}

func TestElementsLayOutKeysAsTheKernelCompares(t *testing.T) {
	el := egressElement(EgressKey{netip.MustParseAddr("10.88.0.5"), "uplink0"}, netip.MustParseAddr("192.0.2.10"))
	wantKey := append([]byte{10, 88, 0, 5}, []byte("uplink0\x00\x00\x00\x00\x00\x00\x00\x00\x00")...)
	if !bytes.Equal(el.Key, wantKey) || !bytes.Equal(el.Val, []byte{192, 0, 2, 10}) {
		t.Errorf("egress element %v : %v, want %v : 192.0.2.10", el.Key, el.Val, wantKey)
	}
	sp := spreadElements([]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")})
	if !bytes.Equal(sp[1].Key, native32(1)) || !bytes.Equal(sp[1].Val, []byte{10, 0, 0, 2}) {
		t.Errorf("spread element 1 is %v : %v", sp[1].Key, sp[1].Val)
	}
}
