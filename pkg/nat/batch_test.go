package nat

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// destroying says, as the kernel's commit does, whether a message leaves
// objects for the destroy worker: every deletion (NFT_MSG_DEL*, and
// DESTROY*, 26 to 31, from Linux 6.3) and a rule replaced in place.
func destroying(m netlink.Message) bool {
	if int(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return false // the batch's begin and end
	}
	switch t := int(m.Header.Type) & 0xff; t {
	case unix.NFT_MSG_DELTABLE, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELRULE, unix.NFT_MSG_DELSET,
		unix.NFT_MSG_DELSETELEM, unix.NFT_MSG_DELOBJ, unix.NFT_MSG_DELFLOWTABLE:
		return true
	case unix.NFT_MSG_NEWRULE:
		return m.Header.Flags&unix.NLM_F_REPLACE != 0
	default:
		return t >= 26 && t <= 31
	}
}

// fakeKernel acknowledges every message and keeps the nf_tables ones.
type fakeKernel struct {
	sent []netlink.Message
}

func (k *fakeKernel) dial(req []netlink.Message) ([]netlink.Message, error) {
	if req == nil { // a receive: one acknowledgement
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
	}
	k.sent = append(k.sent, req...)
	return nil, nil
}

// fakeTable is a Table whose connection goes to k.
func fakeTable(t *testing.T, k *fakeKernel) *Table {
	t.Helper()
	c, err := nftables.New(nftables.WithTestDial(k.dial))
	if err != nil {
		t.Fatal(err)
	}
	return newTable(nftconn.With(c, TableName))
}

// A new IP's ADD (Fresh, one target) sends additions only and reads
// nothing: its commit leaves the kernel no destroy worker, which the
// next release of any netfilter socket on the node would wait for. Its
// network's exclusion elements go in the same transaction, as additions
// (the kernel takes one it holds as it is, and rebuilds nothing). Its
// egress element removed (a DEL) deletes, which the test must see.
func TestAFreshIPsChangeSendsNoDeletion(t *testing.T) {
	ip, ctr := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("10.88.0.5")
	k := &fakeKernel{}
	tb := fakeTable(t, k)
	must(t, tb.Apply(Change{
		Ingress: map[netip.Addr][]netip.Addr{ip: {ctr}}, Fresh: map[netip.Addr]bool{ip: true},
		Egress: map[EgressKey]netip.Addr{{ctr, "uplink0"}: ip}, Hairpin: []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
		Exclude: []intervals.Pair{{Src: netip.MustParsePrefix("10.88.0.0/16"), Dst: netip.MustParsePrefix("10.96.0.0/12")}},
	}))
	excluded := false
	for _, m := range k.sent {
		excluded = excluded || bytes.Contains(m.Data, []byte(ipv4.nosnat+"\x00"))
	}
	if !excluded {
		t.Error("the change sent no element of set nosnat4")
	}
	if tb.c.Commits != 1 || len(k.sent) == 0 {
		t.Fatalf("%d commits of %d messages, want the change in one", tb.c.Commits, len(k.sent))
	}
	for _, m := range k.sent {
		if destroying(m) {
			t.Errorf("a fresh IP's change sent message type %#x, which leaves the kernel something to destroy", m.Header.Type)
		}
		if m.Header.Flags&netlink.Dump != 0 {
			t.Errorf("a fresh IP's change read the kernel (message type %#x)", m.Header.Type)
		}
	}
	k.sent = nil
	must(t, tb.Apply(Change{DelEgress: []EgressKey{{ctr, "uplink0"}}}))
	deleted := false
	for _, m := range k.sent {
		deleted = deleted || destroying(m)
	}
	if !deleted {
		t.Error("removing the egress element sent no deletion: the check above cannot tell one")
	}
}
