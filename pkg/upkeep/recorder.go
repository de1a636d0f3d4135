package upkeep

import (
	"net"
	"net/netip"
)

// Recorder is told what the upkeep does and sees; package metrics turns it
// into Prometheus series. A nil Recorder records nothing, so that the
// plugin's binary, which must stay small, runs the upkeep without it.
type Recorder interface {
	// Held is every IP held on the node as of the last read of the state.
	Held(ips []HeldIP)
	// Announced counts a round sent on an uplink, for reason "periodic"
	// or "defend".
	Announced(uplink, reason string)
	// Repaired counts one drift of a kind (package doc) that a repair fixed.
	Repaired(kind string)
	// ConflictBegan and ConflictEnded frame an episode in which mac
	// claims ip.
	ConflictBegan(ip netip.Addr, mac net.HardwareAddr)
	ConflictEnded(ip netip.Addr, mac net.HardwareAddr)
}

// HeldIP is one IP the node holds: on which uplink, by how many
// attachments.
type HeldIP struct {
	IP      netip.Addr
	Uplink  string
	Device  string
	Holders int
}

// Reasons a round is sent.
const (
	ReasonPeriodic = "periodic"
	ReasonDefend   = "defend"
)

// nopRecorder is the Recorder of an upkeep given none.
type nopRecorder struct{}

func (nopRecorder) Held([]HeldIP)                              {}
func (nopRecorder) Announced(string, string)                   {}
func (nopRecorder) Repaired(string)                            {}
func (nopRecorder) ConflictBegan(netip.Addr, net.HardwareAddr) {}
func (nopRecorder) ConflictEnded(netip.Addr, net.HardwareAddr) {}
