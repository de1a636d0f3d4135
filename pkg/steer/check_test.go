package steer

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// CHECK holds the addresses a record's rules use to the container
// addresses CHECK's prevResult gives: those must include them (a later
// plugin of the chain may add more), whatever the table says.
func TestCheckFailsWhenPrevResultNoLongerGivesAnAddressTheRulesUse(t *testing.T) {
	ctrX4 := netip.MustParsePrefix("10.88.0.99/24")
	for _, tc := range []struct {
		mode      traffic.Mode
		container []netip.Prefix
		want      string // "" passes
	}{
		{traffic.Both, []netip.Prefix{ctrA4, ctrA6}, ""},
		{traffic.Both, []netip.Prefix{ctrX4, ctrA4, ctrA6}, ""},
		{traffic.Both, []netip.Prefix{ctrX4, ctrA6}, "198.51.100.1: steered to 10.88.0.5, which prevResult does not give the container (its IPv4 addresses: 10.88.0.99)"},
		{traffic.Ingress, []netip.Prefix{ctrA6}, "198.51.100.1: steered to 10.88.0.5, which prevResult does not give the container (it gives no IPv4 address)"},
		{traffic.Both, []netip.Prefix{ctrA4}, "2001:db8::1: steered to fd00::5, which prevResult does not give the container (it gives no IPv6 address)"},
		{traffic.Egress, []netip.Prefix{ctrX4, ctrA6}, "198.51.100.1: egress rule SNATs the flows of 10.88.0.5, which prevResult does not give the container (its IPv4 addresses: 10.88.0.99)"},
		{traffic.None, nil, ""},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.mode, tc.container), func(t *testing.T) {
			ips := []netip.Addr{v4a, v6a}
			s := Decide(tc.mode, []netip.Prefix{ctrA4, ctrA6}, ips, placedOn(v4a, "eth0", v6a, "eth0"), nil)
			rec := &store.Record{IPs: ips, Steering: s}
			if s == nil {
				rec.Steering = &store.Steering{}
			}
			err := Check(rec, tc.container, Diff{}, func(netip.Addr) (string, error) { return "eth0", nil })
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CHECK failed with a prevResult that gives every address the rules use: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrDrift) || !strings.Contains(fmt.Sprint(err), tc.want)):
				t.Errorf("CHECK: %v, want drift %q", err, tc.want)
			}
		})
	}
}

func TestCheckNamesAMissingEgressRuleByItsSourceUplinkAndIP(t *testing.T) {
	s := Decide(traffic.Both, []netip.Prefix{ctrA4}, []netip.Addr{v4a}, placedOn(v4a, "eth0"), nil)
	rec := &store.Record{IPs: []netip.Addr{v4a}, Steering: s}
	k := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	uplink := func(netip.Addr) (string, error) { return "eth0", nil }
	for _, tc := range []struct {
		name string
		got  netip.Addr
		want string
	}{
		{"missing", netip.Addr{}, "10.88.0.5: no egress rule via eth0 (from 198.51.100.1) in table inet external-ip"},
		{"from another IP", v4b, "10.88.0.5: egress via eth0 is not from 198.51.100.1 in table inet external-ip (it is 198.51.100.2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(rec, []netip.Prefix{ctrA4}, Diff{Egress: []EgressDiff{{Key: k, Want: v4a, Got: tc.got}}}, uplink)
			if !errors.Is(err, ErrDrift) || fmt.Sprint(err) != tc.want {
				t.Errorf("CHECK: %v, want drift %q", err, tc.want)
			}
		})
	}
}
