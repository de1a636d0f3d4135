package v1alpha1

import (
	"net/netip"
	"regexp"
	"testing"
)

// dnsSubdomain is the rule for an object's name (RFC 1123 subdomain).
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func TestEveryIPHasOneClaimNameThatIsAValidObjectName(t *testing.T) {
	for ip, want := range map[string]string{
		"192.0.2.10":           "192.0.2.10",
		"2001:db8::1":          "2001-db8--1",
		"2001:db8::":           "2001-db8--0",
		"::a":                  "0--a",
		"2001:db8:1:2:3:4:5:6": "2001-db8-1-2-3-4-5-6",
	} {
		a := netip.MustParseAddr(ip)
		name := ClaimName(a)
		if name != want || !dnsSubdomain.MatchString(name) {
			t.Errorf("ClaimName(%s) = %q, want %q, a DNS subdomain", ip, name, want)
		}
		back, err := ParseClaimName(name)
		if err != nil || back != a {
			t.Errorf("ParseClaimName(%q) = %s, %v; want %s", name, back, err, ip)
		}
	}
	for _, bad := range []string{"2001-db8--", "2001-0db8--1", "foo", "192.0.2.010"} {
		if ip, err := ParseClaimName(bad); err == nil {
			t.Errorf("ParseClaimName(%q) = %s: a name no IP has", bad, ip)
		}
	}
}
