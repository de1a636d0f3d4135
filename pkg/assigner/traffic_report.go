package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
)

// reportNAT fills in each IP's targets and egress sources as the table has
// them, and names every way the table and the records disagree
// (compareNAT, worded by natDiff.drift).
func (a *Assigner) reportNAT(rep *Report, recs map[string]*record, lost bool) error {
	if a.opts.NAT == nil {
		return nil
	}
	w := steer.WantOf(recs)
	st, err := a.opts.NAT.Read()
	if err != nil {
		return err
	}
	if !st.Present && w.Empty() {
		return nil
	}
	reportTargets(rep, st)
	rep.Drift = append(rep.Drift, steer.Compare(w, st, a.ownsIP).Drift(lost)...)
	return nil
}

// reportTargets fills in each reported IP's targets and egress sources.
func reportTargets(rep *Report, st *nat.State) {
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
