package nat

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The expressions below are the ones `nft --debug netlink` prints for the
// rules in doc.go, so that `nft list` reads them back as that text.

// family is what differs between the IPv4 and IPv6 halves of the table.
type family struct {
	nfproto      byte
	addrLen      uint32
	saddr, daddr uint32 // offsets in the network header
	keyType      nftables.SetDatatype
	in, snat, hp string // map and set names
	ext          string // the set of external IPs with ingress, for the hairpin rule
	direct       string // the map of external IPs with one target
	seen         string // the set of external IPs DNATed and container addresses SNATed by us (recordRule, snatRule)
	nosnat       string // the set of container subnet . destination that no SNAT of ours applies to (notExcluded)
	// upMarks, upIn, upEg are the uplink marking's maps (uplinks.go).
	upMarks, upIn, upEg string
}

var (
	ipv4 = family{unix.NFPROTO_IPV4, 4, 12, 16, nftables.TypeIPAddr, "in4", "snat4", "hp4", "ext4", "dnat4", "seen4", "nosnat4", "uplink-marks4", "uplink-in4", "uplink-eg4"}
	ipv6 = family{unix.NFPROTO_IPV6, 16, 8, 24, nftables.TypeIP6Addr, "in6", "snat6", "hp6", "ext6", "dnat6", "seen6", "nosnat6", "uplink-marks6", "uplink-in6", "uplink-eg6"}
)

func familyOf(ip netip.Addr) family {
	if ip.Is4() {
		return ipv4
	}
	return ipv6
}

// NFT_REG_1 and NFT_REG_2 (16 bytes each); NFT_REG32_01 follows a 4-byte
// value in a concatenation.
const (
	// ipsDstNAT is IPS_DST_NAT of ct status (linux/netfilter/nf_conntrack_common.h).
	ipsDstNAT = 0x20
	// ctDirOriginal is IP_CT_DIR_ORIGINAL: ct original daddr.
	ctDirOriginal = 0

	reg1   = 1
	reg2   = 2
	reg3   = 3
	reg32n = 9
)

func matchFamily(f family) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{f.nfproto}},
	}
}

func loadAddr(f family, offset, reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: f.addrLen}
}

// recordRule: ip daddr @ext4 add @seen4 { ip daddr }, the first rule of
// prerouting and output. It records an external IP as it gets a new flow,
// before the rules that DNAT it, so that no flow is DNATed unrecorded: a
// DEL reads the IP's element after its commit (Seen), and an IP never
// recorded has no conntrack entry of ours to delete, which spares that
// DEL the clean-up's walk of the whole hash and the process that makes it.
// Only the first packet of a flow passes a nat chain, and an IP already
// recorded costs a lookup.
func recordRule(f family) []expr.Any {
	return append(daddr(f),
		&expr.Lookup{SourceRegister: reg1, SetName: f.ext},
		record(f, reg1),
	)
}

// record: add @seen4 { <the address in reg> }.
func record(f family, reg uint32) expr.Any {
	return &expr.Dynset{SrcRegKey: reg, SetName: f.seen, Operation: unix.NFT_DYNSET_OP_ADD}
}

// ingressRule: ip daddr vmap @in4, for the IPs with several targets (each
// has a chain of its own). The guard is membership of the destination in
// our own maps, which hold exactly the external IPs the node holds: never a
// foreign address (the lesson of portmap's DNAT of foreign addresses, whose
// rules matched ports, not addresses). Not `fib daddr type local`: an IP
// held as a route is not local, and one whose rules are missing is routed
// to the holder and dropped there, never answered by the node.
func ingressRule(f family) []expr.Any {
	return append(daddr(f),
		&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: f.in},
	)
}

// directRule: dnat ip to ip daddr map @dnat4, for the
// IPs with one target, most of them. A data map, not a verdict map's goto:
// a commit that adds a goto or a NAT rule has the kernel validate every
// chain the table's base chains reach, which with a chain per IP made each
// ADD cost O(IPs); an element of a data map asks for no validation.
func directRule(f family) []expr.Any {
	return append(daddr(f),
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: f.direct},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(f.nfproto), RegAddrMin: reg1},
	)
}

// daddr: a packet of family f, with its destination address loaded in reg1.
func daddr(f family) []expr.Any {
	return append(matchFamily(f), loadAddr(f, f.daddr, reg1))
}

// hairpinRule: ct status dnat ip saddr . ip daddr @hp4 ct original ip
// daddr @ext4 masquerade, the set hp4 holding (subnet . subnet) for each
// container subnet. A flow we DNATed to a target from the target's own
// subnet (the container itself, or a neighbour on its bridge reaching its
// external IP) would be answered past us, straight over the link;
// masquerading makes the answer come back through the node. The subnet,
// as portmap's hairpin rule has it, rather than the interface the flow
// came in on: with br_netfilter the IP hooks see the bridge port. Keyed by
// subnet, not by target: the set has a few elements on any node, so its
// changes cost the same with 1 or 1,000 attachments; a flow from a subnet
// to an address of another subnet is routed through the node anyway. The
// flow's original destination must be one of our external IPs (set ext4):
// a flow another program (kube-proxy, portmap) DNATed to the same subnet
// is not ours, and its target must keep seeing the client's own address.
// The rule is sent raw (rawRule), for the ct expression the library
// cannot express.
func hairpinRule(f family) [][]byte {
	e := []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: native32(ipsDstNAT), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
	}
	e = append(e, matchFamily(f)...)
	e = append(e,
		loadAddr(f, f.saddr, reg1),
		loadAddr(f, f.daddr, f.second()),
		&expr.Lookup{SourceRegister: reg1, SetName: f.hp},
	)
	raw := marshalAll(e)
	raw = append(raw, ctOriginalDaddr(f, reg1))
	return append(raw, marshalAll([]expr.Any{
		&expr.Lookup{SourceRegister: reg1, SetName: f.ext},
		&expr.Masq{},
	})...)
}

// ctOriginalDaddr is `ct original ip daddr` (ip6): NFT_CT_DST_IP(6) with
// its direction. The library (v0.3.0) sends a direction only with the
// family-less NFT_CT_DST, which nft cannot list in an inet table (it
// aborts), and the kernel refuses NFT_CT_DST_IP without one.
func ctOriginalDaddr(f family, reg uint32) []byte {
	key := uint32(unix.NFT_CT_DST_IP)
	if f.addrLen == 16 {
		key = unix.NFT_CT_DST_IP6
	}
	data, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_CT_KEY, Data: binary.BigEndian.AppendUint32(nil, key)},
		{Type: unix.NFTA_CT_DREG, Data: binary.BigEndian.AppendUint32(nil, reg)},
		{Type: unix.NFTA_CT_DIRECTION, Data: []byte{ctDirOriginal}},
	})
	b, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_EXPR_NAME, Data: []byte("ct\x00")},
		{Type: unix.NLA_F_NESTED | unix.NFTA_EXPR_DATA, Data: data},
	})
	return b
}

func marshalAll(es []expr.Any) [][]byte {
	out := make([][]byte, len(es))
	for i, e := range es {
		out[i], _ = expr.Marshal(unix.NFPROTO_INET, e) // our own well-formed expressions
	}
	return out
}

// second is the register of a concatenation's second field, after an
// address in reg1: the next 32-bit register after IPv4's 4 bytes, the next
// 128-bit one after IPv6's 16.
func (f family) second() uint32 {
	if f.addrLen == 4 {
		return reg32n
	}
	return reg2
}

// snatRule: ip saddr . ip daddr != @nosnat4 snat ip to ip saddr .
// oifname map @snat4, recording the container address the flow comes
// from (register 1, add @seen4), as recordRule records the external IP
// for DNAT: a DEL that removes the container's egress then knows whether
// it had a flow SNATed (the queue's Leaving). The record follows the
// map's lookup, so only a source that the map SNATs is recorded; a flow
// to a destination its network excludes (notExcluded) is neither SNATed
// nor recorded.
func snatRule(f family) []expr.Any {
	return append(notExcluded(f),
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: f.second()},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg3, IsDestRegSet: true, SetName: f.snat},
		record(f, reg1),
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(f.nfproto), RegAddrMin: reg3},
	)
}

// notExcluded: ip saddr . ip daddr != @nosnat4, leaving the source
// address in reg1. The set holds container subnet . destination for each
// network's egressExcludedCIDRs: one table serves every network, and the
// container subnet says whose list applies (a flow to another node's pod
// keeps its own address there, one to the internet is still SNATed).
func notExcluded(f family) []expr.Any {
	return append(matchFamily(f),
		loadAddr(f, f.saddr, reg1),
		loadAddr(f, f.daddr, f.second()),
		&expr.Lookup{SourceRegister: reg1, SetName: f.nosnat, Invert: true},
	)
}

// dnatSpread: dnat ip to numgen inc mod N map @sp-<ip>. The map is named,
// not anonymous as nft would make it, so that its keys can be declared in
// host byte order (numgen's): its key type is mark, the one nft type of
// four bytes in host order, so `nft list` prints 0x00000000, 0x00000001, ...
func dnatSpread(m *nftables.Set, n int, f family) []expr.Any {
	return []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: uint32(n), Type: unix.NFT_NG_INCREMENTAL},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: m.Name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(f.nfproto), RegAddrMin: reg1},
	}
}

func spreadMap(t *nftables.Table, ip netip.Addr) *nftables.Set {
	return &nftables.Set{Table: t, Name: spreadPrefix + chainSuffix(ip), IsMap: true,
		KeyType: nftables.TypeMark, DataType: familyOf(ip).keyType, KeyByteOrder: binaryutil.NativeEndian}
}

func spreadElements(targets []netip.Addr) []nftables.SetElement {
	els := make([]nftables.SetElement, len(targets))
	for i, a := range targets {
		els[i] = nftables.SetElement{Key: native32(uint32(i)), Val: a.AsSlice()}
	}
	return els
}

func native32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

// ifname is a name as nf_tables stores it: 16 bytes, zero padded.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
