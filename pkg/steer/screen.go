package steer

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/store"
)

// ErrRefused: the request cannot be served on this host (CNI code 7); the
// kind every floor shares.
var ErrRefused = errkind.Refused

// ScreenEgress refuses, before anything changes, egress from a container
// address that already leaves through the same uplink from another
// external IP for another attachment (overlapping container subnets
// across networks): the snat map has one element per address and uplink,
// so taking it would move the other's egress. The element names its IP,
// whose holders are the only records that can have it (others reads
// them, but self's); an element none of them has is stray, and the ADD
// takes it. One lookup of the table per egress rule of s.
func ScreenEgress(t NAT, self store.Attachment, s *store.Steering, others func(self string, ips []netip.Addr) (map[string]*store.Record, error)) error {
	for _, r := range EgressOf(s) {
		ip, ok, err := t.EgressIP(nat.EgressKey{Source: r.Source, Uplink: r.Uplink})
		if err != nil {
			return err
		}
		if !ok || ip == r.IP {
			continue
		}
		recs, err := others(self.Key(), []netip.Addr{ip})
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if slices.Contains(EgressOf(rec.Steering), store.EgressRule{Source: r.Source, Uplink: r.Uplink, IP: ip}) {
				return errkind.Errorf(ErrRefused, "egress of container address %s via %s: attachment %s leaves from %s, so attachment %s cannot leave from %s (one external IP per container address and uplink)",
					r.Source, r.Uplink, rec.Attachment, ip, self, r.IP)
			}
		}
	}
	return nil
}
