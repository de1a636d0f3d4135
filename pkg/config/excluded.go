package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// maxExcluded bounds egressExcludedCIDRs: an ADD stages an element per
// container address and listed CIDR of its family.
const maxExcluded = 64

// setExcluded reads egressExcludedCIDRs: the destinations whose flows
// from the network's containers keep their own source address, never
// SNATed to the external IP (typically the cluster's pod and Service
// CIDRs, on a routed pod network).
func (c *Config) setExcluded(raw *netConf) error {
	c.EgressExcluded = nil
	if len(raw.EgressExcluded) == 0 || string(raw.EgressExcluded) == "null" {
		return nil
	}
	var list []string
	if err := json.Unmarshal(raw.EgressExcluded, &list); err != nil {
		return decodef("egressExcludedCIDRs: want a list of strings, got %s", truncate(raw.EgressExcluded, 64))
	}
	if len(list) > maxExcluded {
		return invalidf("egressExcludedCIDRs: %d CIDRs, at most %d", len(list), maxExcluded)
	}
	for i, s := range list {
		p, err := excludedCIDR(s)
		if err != nil {
			return invalidf("egressExcludedCIDRs[%d]: %q %v", i, s, err)
		}
		c.EgressExcluded = append(c.EgressExcluded, p)
	}
	return nil
}

func excludedCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	switch {
	case err != nil || p.Addr().Zone() != "":
		return p, errors.New("is not a CIDR")
	case p.Addr().Is4In6():
		return p, errors.New("is an IPv4-mapped IPv6 CIDR; write it as IPv4")
	case p != p.Masked():
		return p, fmt.Errorf("has host bits set; write %s", p.Masked())
	case p.Bits() == 0:
		// SNAT to the external IP would never apply to the family, which
		// a config means to say with traffic, if at all.
		fam := "IPv4"
		if p.Addr().Is6() {
			fam = "IPv6"
		}
		return p, fmt.Errorf("excludes every %s destination, so no %s egress would take the external IP: remove it, or say traffic \"ingress\"", fam, fam)
	}
	return p, nil
}
