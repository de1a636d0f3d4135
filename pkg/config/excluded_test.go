package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

func TestEgressExcludedCIDRsTakesBothFamiliesMixed(t *testing.T) {
	c := mustLoad(t, netConf(t, map[string]any{"egressExcludedCIDRs": []string{"10.244.0.0/16", "fd00:10:244::/56", " 10.96.0.0/12 "}}))
	if got, want := fmt.Sprint(c.EgressExcluded), "[10.244.0.0/16 fd00:10:244::/56 10.96.0.0/12]"; got != want {
		t.Errorf("egressExcludedCIDRs loaded as %s, want %s", got, want)
	}
	if c := mustLoad(t, netConf(t, nil)); c.EgressExcluded != nil {
		t.Errorf("no egressExcludedCIDRs loaded as %v, want none: every flow through the uplink SNATed", c.EgressExcluded)
	}
}

func TestEgressExcludedCIDRsRefusesABadCIDRNamingTheKeyAndTheValue(t *testing.T) {
	for _, c := range []struct{ value, says string }{
		{"10.244.0.5/16", "host bits set; write 10.244.0.0/16"},
		{"10.244.0.0", "not a CIDR"},
		{"10.244.0.0/33", "not a CIDR"},
		{"fe80::/64%eth0", "not a CIDR"},
		{"::ffff:10.0.0.0/104", "IPv4-mapped"},
		// Every destination kept from SNAT is egress steering off.
		{"0.0.0.0/0", "excludes every IPv4 destination"},
		{"::/0", "excludes every IPv6 destination"},
	} {
		_, err := config.Load(netConf(t, map[string]any{"egressExcludedCIDRs": []string{"10.96.0.0/12", c.value}}))
		checkErr(t, err, config.ErrInvalid, "egressExcludedCIDRs[1]", fmt.Sprintf("%q", c.value), c.says)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error %q is more than one line", err)
		}
	}
	_, err := config.Load(netConf(t, map[string]any{"egressExcludedCIDRs": "10.96.0.0/12"}))
	checkErr(t, err, config.ErrDecode, "egressExcludedCIDRs", "10.96.0.0/12")
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	_, err = config.Load(netConf(t, map[string]any{"egressExcludedCIDRs": many}))
	checkErr(t, err, config.ErrInvalid, "egressExcludedCIDRs", "65")
}

// A DEL releases what the record says: a bad list must not keep it from
// releasing the attachment.
func TestABadEgressExcludedCIDRDoesNotFailADel(t *testing.T) {
	c, ignored, err := config.LoadForDel(netConf(t, map[string]any{"egressExcludedCIDRs": []string{"nonsense"}}))
	if err != nil || c.EgressExcluded != nil || len(ignored) != 1 {
		t.Errorf("DEL's load: err %v, list %v, ignored %v; want the key passed over and reported", err, c, ignored)
	}
}
