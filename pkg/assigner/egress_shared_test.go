package assigner

import (
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// Two attachments whose container address is the same (overlapping
// container subnets across networks) share its egress rule: one
// (source, uplink) key of the snat map.

func TestDelKeepsTheEgressRuleAnotherAttachmentStillHas(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	f.add(attB, v4a) // same address, same IP: one rule, shared
	f.del(attB)
	k := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	if got, ok := n.st.Egress[k]; !ok || got != v4a {
		t.Fatalf("after b's DEL the egress of %s is %v (present %v), want a's from %s kept", k.Source, got, ok, v4a)
	}
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after b's DEL: %v", err)
	}
	f.del(attA)
	if _, ok := n.st.Egress[k]; ok {
		t.Error("the shared egress rule outlived the last DEL")
	}
}

func TestDelKeepsTheUplinkMemberOfAContainerAddressAnotherAttachmentStillSends(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	f.add(attB, onEth1V4) // same address, same IP
	f.del(attB)
	m := nat.UplinkMember{Slot: 1, Uplink: "eth1", Addr: ctrA4.Addr(), Egress: true}
	if !r.members[m] {
		t.Fatalf("after b's DEL the members are %v, want a's %+v kept", r.members, m)
	}
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after b's DEL: %v", err)
	}
}
