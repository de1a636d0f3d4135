package conntrack

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// nla is one netlink attribute as the kernel reads it: header in host
// order, padded to 4 bytes.
func nla(typ uint16, payload ...[]byte) []byte {
	body := bytes.Join(payload, nil)
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(body)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, body...)
	return append(b, make([]byte, (4-len(b)%4)%4)...)
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

const nested = 1 << 15

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// The kernel rejects a CTA_FILTER without NLA_F_NESTED and reads its flags
// in host order; the addresses go in network order, by the family's types,
// and the status and its mask big-endian. IPv6 sends no address (the
// kernel's test is inverted, see kernelFilters), only the status.
func TestFlowFilterEncodesTuplesAndFilterFlagsAsCtnetlinkReadsThem(t *testing.T) {
	ctr6 := netip.MustParseAddr("fd00:88::5")
	for _, c := range []struct {
		name string
		ff   flowFilter
		want []byte
	}{
		{"DNATed to a target", flowFilter{origDst: ext4, replySrc: ctrA, status: ipsDstNAT}, bytes.Join([][]byte{
			nla(nested|ctaTupleOrig, nla(nested|ctaTupleIP, nla(ctaIPv4Dst, ext4.AsSlice()))),
			nla(nested|ctaTupleReply, nla(nested|ctaTupleIP, nla(ctaIPv4Src, ctrA.AsSlice()))),
			nla(nested|ctaFilter, nla(ctaFilterOrigFlags, u32(1<<1)), nla(ctaFilterReplyFlags, u32(1<<0))),
			nla(ctaStatus, be32(0x20)), nla(ctaStatusMask, be32(0x20)),
		}, nil)},
		{"IPv6 SNATed", flowFilter{replyDst: ext6, status: ipsSrcNAT}, bytes.Join([][]byte{
			nla(ctaStatus, be32(0x10)), nla(ctaStatusMask, be32(0x10)),
		}, nil)},
		{"orig dst and reply src", flowFilter{origDst: ext4, replySrc: ctrA}, bytes.Join([][]byte{
			nla(nested|ctaTupleOrig, nla(nested|ctaTupleIP, nla(ctaIPv4Dst, ext4.AsSlice()))),
			nla(nested|ctaTupleReply, nla(nested|ctaTupleIP, nla(ctaIPv4Src, ctrA.AsSlice()))),
			nla(nested|ctaFilter, nla(ctaFilterOrigFlags, u32(1<<1)), nla(ctaFilterReplyFlags, u32(1<<0))),
		}, nil)},
		{"reply dst only", flowFilter{replyDst: ext4}, bytes.Join([][]byte{
			nla(nested|ctaTupleReply, nla(nested|ctaTupleIP, nla(ctaIPv4Dst, ext4.AsSlice()))),
			nla(nested|ctaFilter, nla(ctaFilterOrigFlags, u32(0)), nla(ctaFilterReplyFlags, u32(1<<1))),
		}, nil)},
		{"IPv6 addresses alone", flowFilter{origDst: ext6, replySrc: ctr6}, nil},
	} {
		got, err := c.ff.encode(ctFamily(c.ff.origDst))
		if !c.ff.origDst.IsValid() {
			got, err = c.ff.encode(ctFamily(c.ff.replyDst))
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: encoded\n%x\nwant\n%x", c.name, got, c.want)
		}
	}
}

// The guard that keeps a kernel ignoring the filter (older than 5.8, or
// IPv6) from making forget delete other flows.
func TestFlowFilterMatchesOnlyEntriesWithEveryGivenAddress(t *testing.T) {
	client := netip.MustParseAddr("198.51.100.7")
	toA := flow{origDst: ext4, replySrc: ctrA, replyDst: client, status: ipsDstNAT | 0x8}
	toB := flow{origDst: ext4, replySrc: ctrB, replyDst: client, status: ipsDstNAT}
	straight := flow{origDst: ctrA, replySrc: ctrA, replyDst: client}
	egress := flow{origDst: client, replySrc: client, replyDst: ext4, status: ipsSrcNAT}
	unNATed := flow{origDst: ext4, replySrc: ctrA, replyDst: client}
	byTarget := flowFilter{origDst: ext4, replySrc: ctrA, status: ipsDstNAT}
	for _, c := range []struct {
		ff   flowFilter
		f    flow
		want bool
	}{
		{byTarget, toA, true},
		{byTarget, toB, false},
		{byTarget, straight, false},
		{byTarget, unNATed, false},
		{flowFilter{origDst: ext4, replySrc: ctrA}, unNATed, true},
		{flowFilter{replyDst: ext4, status: ipsSrcNAT}, egress, true},
		{flowFilter{replyDst: ext4, status: ipsDstNAT}, egress, false},
		{flowFilter{origDst: ext4}, toB, true},
		{flowFilter{origDst: ext4}, egress, false},
		{flowFilter{replyDst: ext4}, egress, true},
		{flowFilter{replyDst: ext4}, toA, false},
	} {
		if got := c.ff.match(c.f); got != c.want {
			t.Errorf("filter %v/%v/%v on entry %v/%v/%v: match %v, want %v", c.ff.origDst, c.ff.replySrc,
				c.ff.replyDst, c.f.origDst, c.f.replySrc, c.f.replyDst, got, c.want)
		}
	}
}
