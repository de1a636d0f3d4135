package assigner

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// reportNAT fills in each IP's targets and egress sources as the table has
// them, and names every way the table and the records disagree.
// With the state lost it also names the hairpin subnets GC would remove;
// otherwise not: a DEL leaves its subnet for GC by design (see
// keepSharedHairpins), and it steers nothing.
func (a *Assigner) reportNAT(rep *Report, recs map[string]*record, lost bool) error {
	if a.opts.NAT == nil {
		return nil
	}
	w := wantNAT(recs)
	st, err := a.opts.NAT.Read()
	if err != nil {
		return err
	}
	if !st.Present && w.empty() {
		return nil
	}
	drift := func(format string, args ...any) { rep.Drift = append(rep.Drift, fmt.Sprintf(format, args...)) }
	if !st.Present || len(st.Broken) > 0 {
		drift("nftables table inet %s: %s", nat.TableName, brokenText(st))
	}
	reportTargets(rep, st, w, drift)
	for ip, targets := range st.Ingress {
		if _, ok := w.ingress[ip]; !ok && a.ownsIP(ip) {
			drift("%s: ingress rule to %v held by no record", ip, targets)
		}
	}
	for k, ip := range w.egress {
		if got := st.Egress[k]; got != ip {
			drift("%s: egress via %s from %v, the records say %s", k.Source, k.Uplink, got, ip)
		}
	}
	for k, ip := range st.Egress {
		if _, ok := w.egress[k]; !ok && a.ownsIP(ip) {
			drift("%s: egress via %s from %s held by no record", k.Source, k.Uplink, ip)
		}
	}
	for p := range w.hairpin {
		if !hairpinServed(st, p) {
			drift("%s: no hairpin rule for the subnet", p)
		}
	}
	for _, p := range a.hairpinPlan(st, w).DelHairpin {
		if lost {
			drift("%s: hairpin subnet needed by no record", p)
		}
	}
	return nil
}

// reportTargets fills in each reported IP's targets and egress sources,
// and names an IP whose targets are not its records'.
func reportTargets(rep *Report, st *nat.State, w natWant, drift func(string, ...any)) {
	for i := range rep.IPs {
		ir := &rep.IPs[i]
		ir.Targets = st.Ingress[ir.Addr]
		for k, ip := range st.Egress {
			if ip == ir.Addr {
				ir.EgressFrom = append(ir.EgressFrom, k.Source)
			}
		}
		slices.SortFunc(ir.EgressFrom, netip.Addr.Compare)
		if !slices.Equal(w.ingress[ir.Addr], ir.Targets) {
			drift("%s: ingress steers to %v, the records to %v", ir.Addr, ir.Targets, w.ingress[ir.Addr])
		}
	}
}
