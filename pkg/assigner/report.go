package assigner

// The CLI's report (external-ip status): what the holder carries, who holds
// it, and any drift. The CNI STATUS verb is in status.go.

import (
	"fmt"
	"net/netip"
	"slices"
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
	// Uplinks lists the uplinks whose flows we route (uplinks_sync.go).
	Uplinks []UplinkReport `json:"uplinks,omitempty"`
}

// IPReport is one held IP.
type IPReport struct {
	Addr     netip.Addr   `json:"ip"`
	Uplink   string       `json:"uplink"`
	Holders  []Attachment `json:"holders"`
	OnDevice bool         `json:"onDevice"`
	Proxy    *bool        `json:"proxyNeighbour,omitempty"`
	// Targets and EgressFrom are what table inet external-ip steers: new
	// flows to the IP go to Targets; flows from EgressFrom leave from it.
	Targets    []netip.Addr `json:"targets,omitempty"`
	EgressFrom []netip.Addr `json:"egressFrom,omitempty"`
}

// Report reads the state and the holder; it changes nothing.
func (a *Assigner) Report() (*Report, error) {
	rep := &Report{Device: a.opts.Device, StateDir: a.st.dir, IPs: []IPReport{}, Drift: []string{}}
	l, err := a.lockToRead()
	if err != nil {
		return nil, err
	}
	if l == nil { // no state, or not all of it: nothing is held
		var dev int
		rep.Holder, dev = a.holderState()
		return rep, a.reportLost(rep, dev)
	}
	defer l.unlock()
	if rep.Pending, err = a.st.has(top, journalName); err != nil {
		return nil, err
	}
	if rep.Pending {
		rep.Drift = append(rep.Drift, "an interrupted change is pending in "+a.st.journalPath()+"; the next ADD, DEL or GC settles it (an ADD is rolled back, a release finished)")
	}
	recs, err := a.st.records()
	if err != nil {
		return nil, err
	}
	var dev int
	rep.Holder, dev = a.holderState()
	if err := a.reportIPs(rep, recs, dev); err != nil {
		return nil, err
	}
	late, err := a.overdue(netip.Addr{})
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
	l, err := a.lookHolder()
	if err != nil {
		return err.Error(), 0
	}
	dev, err := a.judge(l)
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
	onDevice := map[netip.Addr]bool{}
	if dev != 0 {
		addrs, err := a.k.holderAddrs(dev)
		if err != nil {
			return err
		}
		for _, ip := range addrs {
			onDevice[ip] = true
		}
	}
	ips := keys(want)
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		ir, err := a.reportIP(rep, ip, want[ip], recs, onDevice[ip])
		if err != nil {
			return err
		}
		rep.IPs = append(rep.IPs, ir)
	}
	indexed, err := a.st.indexed()
	if err != nil {
		return err
	}
	return a.reportStray(rep, want, onDevice, indexed)
}

func (a *Assigner) reportIP(rep *Report, ip netip.Addr, keys []string, recs map[string]*record, on bool) (IPReport, error) {
	e, err := a.st.readIP(ip)
	if err != nil {
		return IPReport{}, err
	}
	slices.Sort(keys)
	ir := IPReport{Addr: ip, Uplink: e.Uplink, OnDevice: on}
	for _, k := range keys {
		ir.Holders = append(ir.Holders, recs[k].Attachment)
	}
	if !slices.Equal(e.Holders, keys) {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: index lists %d holders, records %d", ip, len(e.Holders), len(keys)))
	}
	if !on {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: held but not on %s", ip, a.opts.Device))
	}
	if e.Uplink != "" && a.uplinkGone(e.Uplink) {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: its uplink %s is gone; the next ADD or GC chooses another", ip, e.Uplink))
		return ir, nil
	}
	if ip.Is6() && e.Uplink != "" {
		ok, err := a.k.hasProxy(e.Uplink, ip)
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
	if l, err := a.lookHolder(); err != nil || !a.ownedBy(l.Alias) {
		return err
	}
	addrs, err := a.k.holderAddrs(dev)
	if err != nil {
		return err
	}
	onDevice := map[netip.Addr]bool{}
	for _, ip := range addrs {
		onDevice[ip] = true
	}
	if err := a.reportStray(rep, nil, onDevice, nil); err != nil {
		return err
	}
	if len(addrs) > 0 {
		rep.Drift = append(rep.Drift, fmt.Sprintf("state directory %s is missing while %s carries addresses: GC and repair remove them", a.st.dir, a.opts.Device))
	}
	return a.reportNAT(rep, map[string]*record{}, true)
}

// reportStray names what is on the holder or in the index (indexed) with
// no record, and the proxy entries of those IPs, which GC removes with them.
func (a *Assigner) reportStray(rep *Report, want map[netip.Addr][]string, onDevice map[netip.Addr]bool, indexed []netip.Addr) error {
	var stray6 []netip.Addr
	for ip := range onDevice {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: on %s but held by no record", ip, a.opts.Device))
			stray6 = append(stray6, ip)
		}
	}
	for _, ip := range indexed {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: indexed but held by no record", ip))
			stray6 = append(stray6, ip)
		}
	}
	err := a.reportStrayProxies(rep, slices.DeleteFunc(stray6, netip.Addr.Is4))
	slices.Sort(rep.Drift)
	return err
}

// reportStrayProxies names the proxy entries of IPv6 IPs no record holds.
func (a *Assigner) reportStrayProxies(rep *Report, ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	entries, err := a.k.proxyEntries()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if slices.Contains(ips, e.IP) {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: proxy neighbour entry on %s held by no record", e.IP, e.Link))
		}
	}
	return nil
}
