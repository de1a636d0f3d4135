package announce

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// LookUplink is the uplink named name as it is now, for the node process,
// which announces long after an IP was placed: its index or MAC may have
// changed since.
func LookUplink(name string) (Uplink, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return Uplink{}, fmt.Errorf("uplink %q: %w", name, err)
	}
	up := Uplink{Name: ifi.Name, Index: ifi.Index, MAC: ifi.HardwareAddr}
	fwd, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifi.Name + "/forwarding")
	up.Router = err == nil && strings.TrimSpace(string(fwd)) == "1"
	return up, nil
}

// AskFrom is the uplink's own IPv4 address a node asks for ip from (the
// conflict probe's second question, and a standby's checks), the zero
// Addr when it has none.
func AskFrom(up Uplink, ip netip.Addr) (netip.Addr, error) { return uplinkIPv4(up, ip) }

// Incoming is a socket filter for the node process's listeners: it drops
// the frames this node sends (PACKET_OUTGOING), then runs rest (nil:
// pass).
func Incoming(rest []bpf.Instruction) []bpf.Instruction {
	if rest == nil {
		rest = []bpf.Instruction{bpf.RetConstant{Val: 0xffff}}
	}
	return append([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: packetOutgoing, SkipTrue: 1},
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
