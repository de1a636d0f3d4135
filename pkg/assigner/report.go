package assigner

// The CLI's report (external-ip status): what the holder carries, who holds
// it, and any drift. The CNI STATUS verb is in status.go.

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/report"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// Report is what the holder device carries and who holds it, as an
// operator sees it (package report).
type (
	Report   = report.Report
	IPReport = report.IPReport
)

// Report reads the state and the holder; it changes nothing.
func (a *Assigner) Report() (*Report, error) {
	a.startCall()
	l, err := a.lockToRead()
	if err != nil {
		return nil, err
	}
	if l == nil { // no state, or not all of it: nothing is held
		r := a.reporting()
		var dev int
		r.rep.Holder, dev = a.holderState()
		return r.rep, r.lost(dev)
	}
	defer l.Unlock()
	return a.reportLocked()
}

// reporting starts an empty report.
func (a *Assigner) reporting() *reporting {
	rep := &Report{Device: a.opts.Device, StateDir: a.st.Dir(), IPs: []IPReport{}, Drift: []string{}}
	return &reporting{Assigner: a, rep: rep}
}

// reportLocked is Report under a lock its caller holds, on a state
// directory that is there.
func (a *Assigner) reportLocked() (*Report, error) {
	r := a.reporting()
	rep := r.rep
	var err error
	if rep.Pending, err = a.st.Has(store.JournalFile); err != nil {
		return nil, err
	}
	if rep.Pending {
		rep.Drift = append(rep.Drift, "an interrupted change is pending in "+a.st.Path(store.JournalFile)+"; the next ADD, DEL or GC settles it (an ADD is rolled back, a release finished)")
	}
	recs, err := a.st.Records()
	if err != nil {
		return nil, err
	}
	var dev int
	rep.Holder, dev = a.holderState()
	if err := r.ips(recs, dev); err != nil {
		return nil, err
	}
	late, err := a.queue.Overdue(netip.Addr{})
	if err != nil {
		return nil, err
	}
	rep.Drift = append(rep.Drift, late...)
	if err := r.nat(recs, false); err != nil {
		return nil, err
	}
	return rep, r.routing(recs)
}

// reporting is one status report being built: rep, the report, gathers
// what every part finds.
type reporting struct {
	*Assigner
	rep *Report
}

// holderState describes the holder and returns its index, 0 when it is
// missing or not ours.
func (a *Assigner) holderState() (string, int) {
	l, err := a.holder.Look()
	if err != nil {
		return err.Error(), 0
	}
	dev, err := a.holder.Judge(l)
	switch {
	case err != nil:
		return err.Error(), 0
	case dev == 0:
		return "missing", 0
	case !l.Up:
		return "down", dev
	}
	return "up", dev
}

// ips fills the report with each held IP and every disagreement between
// the records, the index and the holder device.
func (r *reporting) ips(recs map[string]*record, dev int) error {
	want := map[netip.Addr][]string{}
	for key, rec := range recs {
		for _, ip := range rec.IPs {
			want[ip] = append(want[ip], key)
		}
	}
	on, err := r.holder.Carried(dev)
	if err != nil {
		return err
	}
	waiting := store.StandbyOf(recs)
	ips := union(keys(want), keys(waiting))
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		ir, err := r.ip(ip, want[ip], recs, on)
		if err != nil {
			return err
		}
		r.rep.IPs = append(r.rep.IPs, r.standby(ir, waiting[ip], recs, on))
	}
	indexed, err := r.st.Indexed()
	if err != nil {
		return err
	}
	return r.stray(want, on, indexed)
}

func (r *reporting) ip(ip netip.Addr, keys []string, recs map[string]*record, c host.Carried) (IPReport, error) {
	e, err := r.st.ReadIP(ip)
	if err != nil {
		return IPReport{}, err
	}
	slices.Sort(keys)
	on := c.Holds(ip, e.Route)
	ir := IPReport{Addr: ip, Uplink: e.Uplink, Hold: e.Route.String(), Route: int(e.Route), OnDevice: on}
	if len(keys) == 0 {
		return ir, nil // held in standby only: see standby
	}
	for _, k := range keys {
		ir.Holders = append(ir.Holders, recs[k].Attachment)
	}
	if !slices.Equal(e.Holders, keys) {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: index lists %d holders, records %d", ip, len(e.Holders), len(keys)))
	}
	switch {
	case !on && e.Route.Route():
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: held as a route but %s has no route to it with protocol %d", ip, r.opts.Device, e.Route))
	case !on:
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: held but not on %s", ip, r.opts.Device))
	}
	if e.Route.Route() && c.Addrs[ip] {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: held as a route but also an address of %s", ip, r.opts.Device))
	}
	if e.Uplink != "" && r.ups.Gone(e.Uplink) {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: its uplink %s is gone; the next ADD or GC chooses another", ip, e.Uplink))
		return ir, nil
	}
	if host.NeedsProxy(ip, e.Route) && e.Uplink != "" {
		ok, err := r.k.HasProxy(e.Uplink, ip)
		ir.Proxy = &ok
		if err == nil && !ok {
			r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: no proxy neighbour entry on %s", ip, e.Uplink))
		}
	}
	return ir, nil
}

// lost names, when the state directory is missing, what GC and repair
// would then remove: everything on a holder marked for this very dataDir
// (lostState's rule), with its proxy entries and NAT rules.
func (r *reporting) lost(dev int) error {
	if dev == 0 {
		return nil
	}
	if l, err := r.holder.Look(); err != nil || !r.holder.OwnedBy(l.Alias) {
		return err
	}
	c, err := r.holder.Carried(dev)
	if err != nil {
		return err
	}
	if err := r.stray(nil, c, nil); err != nil {
		return err
	}
	if len(c.Addrs)+len(c.Routes) > 0 {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("state directory %s is missing while %s carries addresses or routes: GC and repair remove them", r.st.Dir(), r.opts.Device))
	}
	return r.nat(map[string]*record{}, true)
}

// stray names what is on the holder (c) or in the index (indexed) with no
// record, and the proxy entries of those IPs, which GC removes with them:
// an IPv6 address's, and a route's of either family.
func (r *reporting) stray(want map[netip.Addr][]string, c host.Carried, indexed []netip.Addr) error {
	var stray []netip.Addr
	for ip := range c.Addrs {
		if _, held := want[ip]; !held {
			r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: on %s but held by no record", ip, r.opts.Device))
			if ip.Is6() {
				stray = append(stray, ip)
			}
		}
	}
	for ip := range c.Routes {
		if _, held := want[ip]; !held {
			r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: routed to %s but held by no record", ip, r.opts.Device))
			stray = append(stray, ip)
		}
	}
	for _, ip := range indexed {
		if e, err := r.st.ReadIP(ip); err == nil && len(e.Holders) == 0 && len(e.Standby) > 0 {
			continue // standing by: standby reports it
		}
		if _, held := want[ip]; !held {
			r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: indexed but held by no record", ip))
			stray = append(stray, ip)
		}
	}
	err := r.strayProxies(stray)
	slices.Sort(r.rep.Drift)
	return err
}

// strayProxies names the proxy entries of the IPs no record holds.
func (r *reporting) strayProxies(ips []netip.Addr) error {
	entries, err := r.holder.StrayProxies(ips)
	for _, e := range entries {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: proxy neighbour entry on %s held by no record", e.IP, e.Link))
	}
	return err
}

// nat fills in each IP's targets and egress sources as the table has
// them, and names every way the table and the records disagree
// (steer.Compare, worded by steer.Diff.Drift).
func (r *reporting) nat(recs map[string]*record, lost bool) error {
	if r.opts.NAT == nil {
		return nil
	}
	w := steer.WantOf(recs)
	st, err := r.opts.NAT.Read()
	if err != nil {
		return err
	}
	if !st.Present && w.Empty() {
		return nil
	}
	r.rep.FillTargets(st)
	var known []netip.Addr // a lost state has no index to read
	if !lost {
		if known, err = r.st.Indexed(); err != nil {
			return err
		}
	}
	r.rep.Drift = append(r.rep.Drift, steer.Compare(w, st, r.holder.MayOwn(known)).Drift(lost)...)
	return nil
}
