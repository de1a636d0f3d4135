package conntrack

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ctnetlink's attributes for making an entry (nfnetlink_conntrack.h).
const (
	msgCtNew       = 0
	ctaTupleProto  = 2
	ctaProtoNum    = 1
	ctaProtoSrc    = 2
	ctaProtoDst    = 3
	ctaTimeout     = 7
	ctaNATSrc      = 6
	ctaNATDst      = 13
	ctaNATV4MinIP  = 1
	ctaNATV4MaxIP  = 2
	ctaNATV6MinIP  = 4
	ctaNATV6MaxIP  = 5
	flowTimeoutSec = 100
)

// createNATFlow makes the entry f describes as our rules would have: a
// reply source other than the original destination is a DNAT to it, a
// reply destination other than the original source an SNAT to it, so the
// entry has the NAT status bits a real flow gets (conntrack -I --dst-nat
// does the same). netlink.ConntrackCreate sets no NAT: its entries would
// look NATed by their tuples alone, which no real flow does.
func createNATFlow(c *netlink.Conn, f *vnl.ConntrackFlow) error {
	fam := f.FamilyType
	src, _ := netip.AddrFromSlice(f.Forward.SrcIP)
	dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
	replySrc, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
	replyDst, _ := netip.AddrFromSlice(f.Reverse.DstIP)
	ae := netlink.NewAttributeEncoder()
	tuple(ae, ctaTupleOrig, src, dst, f.Forward)
	tuple(ae, ctaTupleReply, dst, src, f.Reverse) // inverted: the kernel NATs it
	ae.Bytes(ctaTimeout, binary.BigEndian.AppendUint32(nil, flowTimeoutSec))
	if replySrc != dst {
		natTo(ae, ctaNATDst, replySrc)
	}
	if replyDst != src {
		natTo(ae, ctaNATSrc, replyDst)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	m := ctMessage(msgCtNew, netlink.Create|netlink.Excl|netlink.Acknowledge, fam, attrs)
	_, err = c.Execute(m)
	return err
}

func tuple(ae *netlink.AttributeEncoder, typ uint16, src, dst netip.Addr, t vnl.IPTuple) {
	ae.Nested(typ, func(te *netlink.AttributeEncoder) error {
		te.Nested(ctaTupleIP, func(ie *netlink.AttributeEncoder) error {
			ie.Bytes(ipAttr(src, ctaIPv4Src, ctaIPv6Src), src.AsSlice())
			ie.Bytes(ipAttr(dst, ctaIPv4Dst, ctaIPv6Dst), dst.AsSlice())
			return nil
		})
		te.Nested(ctaTupleProto, func(pe *netlink.AttributeEncoder) error {
			pe.Uint8(ctaProtoNum, t.Protocol)
			pe.Bytes(ctaProtoSrc, binary.BigEndian.AppendUint16(nil, t.SrcPort))
			pe.Bytes(ctaProtoDst, binary.BigEndian.AppendUint16(nil, t.DstPort))
			return nil
		})
		return nil
	})
}

func natTo(ae *netlink.AttributeEncoder, typ uint16, to netip.Addr) {
	ae.Nested(typ, func(ne *netlink.AttributeEncoder) error {
		ne.Bytes(ipAttr(to, ctaNATV4MinIP, ctaNATV6MinIP), to.AsSlice())
		ne.Bytes(ipAttr(to, ctaNATV4MaxIP, ctaNATV6MaxIP), to.AsSlice())
		return nil
	})
}

func createFlows(t *testing.T, flows []*vnl.ConntrackFlow) {
	t.Helper()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, f := range flows {
		if err := createNATFlow(c, f); err != nil {
			t.Fatalf("creating flow %v: %v", f, err)
		}
	}
}
