package report

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// Report is what the holder device carries and who holds it, as an
// operator sees it: the assigner takes it under the lock, for a
// consistent view.
type Report struct {
	Device   string     `json:"device"`
	StateDir string     `json:"stateDir"`
	Holder   string     `json:"holder"` // up, down, missing, or why it is not ours
	Pending  bool       `json:"pendingChange"`
	IPs      []IPReport `json:"ips"`
	// Drift lists every way the kernel and the state disagree.
	Drift []string `json:"drift"`
	// Uplinks lists the uplinks whose flows we route (package uplinkroute).
	Uplinks []uplinkroute.UplinkReport `json:"uplinks,omitempty"`
}

// IPReport is one held IP.
type IPReport struct {
	Addr    netip.Addr         `json:"ip"`
	Uplink  string             `json:"uplink"`
	Holders []store.Attachment `json:"holders"`
	// Standby lists the attachments that hold the IP in standby here:
	// another node answers for it while they wait.
	Standby []store.Attachment `json:"standby,omitempty"`
	// Hold is how the IP is held: "address" or "route"; OnDevice says that
	// it is on the holder so (the address, or the route of protocol Route).
	Hold     string `json:"hold"`
	Route    int    `json:"routeProtocol,omitempty"`
	OnDevice bool   `json:"onDevice"`
	Proxy    *bool  `json:"proxyNeighbour,omitempty"`
	// Targets and EgressFrom are what table inet external-ip steers: new
	// flows to the IP go to Targets; flows from EgressFrom leave from it.
	Targets    []netip.Addr `json:"targets,omitempty"`
	EgressFrom []netip.Addr `json:"egressFrom,omitempty"`
}

// FillTargets fills in each reported IP's targets and egress sources as
// the table st has them.
func (rep *Report) FillTargets(st *nat.State) {
	for i := range rep.IPs {
		ir := &rep.IPs[i]
		ir.Targets = st.Ingress[ir.Addr]
		for k, ip := range st.Egress {
			if ip == ir.Addr {
				ir.EgressFrom = append(ir.EgressFrom, k.Source)
			}
		}
		slices.SortFunc(ir.EgressFrom, netip.Addr.Compare)
	}
}
