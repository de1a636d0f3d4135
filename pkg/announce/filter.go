package announce

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Incoming is the socket filter of every listener on an uplink (the
// conflict probe, the node process's conflict watch and standby checks):
// it passes only frames the uplink's own LAN sent to this node, then runs
// rest (nil: pass). It drops:
//
//   - the frames this node sends (PACKET_OUTGOING): every packet socket
//     sees them on the way out;
//   - frames of another VLAN that no VLAN device took (PACKET_OTHERHOST):
//     on a trunk uplink the kernel strips the tag of a VLAN it has no
//     device for and hands the frame on untagged, marked for another host
//     (__netif_receive_skb_core), so a host of that VLAN using our IP
//     would look like one on our LAN. Unicast frames to other hosts, which
//     a promiscuous uplink also marks so, are no answer to us either;
//   - frames a device stacked on the uplink took: a VLAN device for the
//     tag (or a macvlan for its address) becomes the frame's device, yet
//     the kernel still delivers it to the sockets bound to the device it
//     came in on, the uplink, whose index then differs from the frame's.
//
// Neither the VLAN extensions of the filter nor PACKET_AUXDATA can tell a
// tagged frame here: the kernel clears the tag before it delivers to a
// socket of one protocol (ARP, IPv6), as these are. The VLAN-device case
// thus rests on the interface index alone.
func Incoming(up Uplink, rest []bpf.Instruction) []bpf.Instruction {
	if rest == nil {
		rest = []bpf.Instruction{bpf.RetConstant{Val: 0xffff}}
	}
	return append([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OTHERHOST, SkipTrue: 2},
		bpf.LoadExtension{Num: bpf.ExtInterfaceIndex},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(up.Index), SkipTrue: 1},
		bpf.RetConstant{Val: 0},
	}, rest...)
}

// ICMPv6Types passes IPv6 frames carrying ICMPv6 (no extension header,
// as neighbour discovery never has) of a type from lo to hi.
func ICMPv6Types(lo, hi uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: ip6NextOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_ICMPV6, SkipTrue: 4},
		bpf.LoadAbsolute{Off: icmpOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: lo, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: hi, SkipTrue: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	}
}

// arpAbout passes ARP frames whose sender IP or target IP is ip: answers
// and others' probes. arpClaim decides.
func arpAbout(ip netip.Addr) []bpf.Instruction {
	v := binary.BigEndian.Uint32(ip.AsSlice())
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: arpSPAOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: 3},
		bpf.LoadAbsolute{Off: arpTPAOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.RetConstant{Val: 0xffff},
	}
}

// ndAbout passes ICMPv6 neighbour solicitations and advertisements (with
// no extension headers: neighbour discovery never uses them) whose target
// is ip. ndClaim decides.
func ndAbout(ip netip.Addr) []bpf.Instruction {
	// Every failed test jumps to the last instruction, the drop.
	const size = 15
	var prog []bpf.Instruction
	dropIf := func(cond bpf.JumpTest, val uint32) {
		prog = append(prog, bpf.JumpIf{Cond: cond, Val: val, SkipTrue: uint8(size - 2 - len(prog))})
	}
	prog = append(prog, bpf.LoadAbsolute{Off: ip6NextOff, Size: 1})
	dropIf(bpf.JumpNotEqual, unix.IPPROTO_ICMPV6)
	prog = append(prog, bpf.LoadAbsolute{Off: icmpOff, Size: 1})
	dropIf(bpf.JumpLessThan, ipv6TypeNS)
	dropIf(bpf.JumpGreaterThan, ipv6TypeNA)
	t := ip.As16()
	for i := 0; i < 16; i += 4 {
		prog = append(prog, bpf.LoadAbsolute{Off: uint32(ndTargetOff + i), Size: 4})
		dropIf(bpf.JumpNotEqual, binary.BigEndian.Uint32(t[i:]))
	}
	return append(prog, bpf.RetConstant{Val: 0xffff}, bpf.RetConstant{Val: 0})
}
