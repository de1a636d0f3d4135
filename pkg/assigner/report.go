package assigner

// The CLI's report (external-ip status): what the holder carries, who holds
// it, and any drift. The CNI STATUS verb is in status.go.

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// Report is what the holder device carries and who holds it, as an
// operator sees it: read only, taken under the lock for a consistent view.
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
	Addr    netip.Addr   `json:"ip"`
	Uplink  string       `json:"uplink"`
	Holders []Attachment `json:"holders"`
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

// Report reads the state and the holder; it changes nothing.
func (a *Assigner) Report() (*Report, error) {
	a.startCall()
	rep := &Report{Device: a.opts.Device, StateDir: a.st.Dir(), IPs: []IPReport{}, Drift: []string{}}
	l, err := a.lockToRead()
	if err != nil {
		return nil, err
	}
	if l == nil { // no state, or not all of it: nothing is held
		var dev int
		rep.Holder, dev = a.holderState()
		return rep, a.reportLost(rep, dev)
	}
	defer l.Unlock()
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
	if err := a.reportIPs(rep, recs, dev); err != nil {
		return nil, err
	}
	late, err := a.queue.Overdue(netip.Addr{})
	if err != nil {
		return nil, err
	}
	rep.Drift = append(rep.Drift, late...)
	if err := a.reportNAT(rep, recs, false); err != nil {
		return nil, err
	}
	return rep, a.reportRouting(rep, recs)
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

// reportIPs fills rep with each held IP and every disagreement between the
// records, the index and the holder device.
func (a *Assigner) reportIPs(rep *Report, recs map[string]*record, dev int) error {
	want := map[netip.Addr][]string{}
	for key, r := range recs {
		for _, ip := range r.IPs {
			want[ip] = append(want[ip], key)
		}
	}
	on, err := a.holder.Carried(dev)
	if err != nil {
		return err
	}
	ips := keys(want)
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		ir, err := a.reportIP(rep, ip, want[ip], recs, on)
		if err != nil {
			return err
		}
		rep.IPs = append(rep.IPs, ir)
	}
	indexed, err := a.st.Indexed()
	if err != nil {
		return err
	}
	return a.reportStray(rep, want, on, indexed)
}

func (a *Assigner) reportIP(rep *Report, ip netip.Addr, keys []string, recs map[string]*record, c host.Carried) (IPReport, error) {
	e, err := a.st.ReadIP(ip)
	if err != nil {
		return IPReport{}, err
	}
	slices.Sort(keys)
	on := c.Holds(ip, e.Route)
	ir := IPReport{Addr: ip, Uplink: e.Uplink, Hold: e.Route.String(), Route: int(e.Route), OnDevice: on}
	for _, k := range keys {
		ir.Holders = append(ir.Holders, recs[k].Attachment)
	}
	if !slices.Equal(e.Holders, keys) {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: index lists %d holders, records %d", ip, len(e.Holders), len(keys)))
	}
	switch {
	case !on && e.Route.Route():
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: held as a route but %s has no route to it with protocol %d", ip, a.opts.Device, e.Route))
	case !on:
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: held but not on %s", ip, a.opts.Device))
	}
	if e.Route.Route() && c.Addrs[ip] {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: held as a route but also an address of %s", ip, a.opts.Device))
	}
	if e.Uplink != "" && a.ups.Gone(e.Uplink) {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: its uplink %s is gone; the next ADD or GC chooses another", ip, e.Uplink))
		return ir, nil
	}
	if host.NeedsProxy(ip, e.Route) && e.Uplink != "" {
		ok, err := a.k.HasProxy(e.Uplink, ip)
		ir.Proxy = &ok
		if err == nil && !ok {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: no proxy neighbour entry on %s", ip, e.Uplink))
		}
	}
	return ir, nil
}

// reportLost names, when the state directory is missing, what GC and
// repair would then remove: everything on a holder marked for this very
// dataDir (lostState's rule), with its proxy entries and NAT rules.
func (a *Assigner) reportLost(rep *Report, dev int) error {
	if dev == 0 {
		return nil
	}
	if l, err := a.holder.Look(); err != nil || !a.holder.OwnedBy(l.Alias) {
		return err
	}
	c, err := a.holder.Carried(dev)
	if err != nil {
		return err
	}
	if err := a.reportStray(rep, nil, c, nil); err != nil {
		return err
	}
	if len(c.Addrs)+len(c.Routes) > 0 {
		rep.Drift = append(rep.Drift, fmt.Sprintf("state directory %s is missing while %s carries addresses or routes: GC and repair remove them", a.st.Dir(), a.opts.Device))
	}
	return a.reportNAT(rep, map[string]*record{}, true)
}

// reportStray names what is on the holder (c) or in the index (indexed)
// with no record, and the proxy entries of those IPs, which GC removes
// with them: an IPv6 address's, and a route's of either family.
func (a *Assigner) reportStray(rep *Report, want map[netip.Addr][]string, c host.Carried, indexed []netip.Addr) error {
	var stray []netip.Addr
	for ip := range c.Addrs {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: on %s but held by no record", ip, a.opts.Device))
			if ip.Is6() {
				stray = append(stray, ip)
			}
		}
	}
	for ip := range c.Routes {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: routed to %s but held by no record", ip, a.opts.Device))
			stray = append(stray, ip)
		}
	}
	for _, ip := range indexed {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: indexed but held by no record", ip))
			stray = append(stray, ip)
		}
	}
	err := a.reportStrayProxies(rep, stray)
	slices.Sort(rep.Drift)
	return err
}

// reportStrayProxies names the proxy entries of the IPs no record holds.
func (a *Assigner) reportStrayProxies(rep *Report, ips []netip.Addr) error {
	entries, err := a.holder.StrayProxies(ips)
	for _, e := range entries {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: proxy neighbour entry on %s held by no record", e.IP, e.Link))
	}
	return err
}
