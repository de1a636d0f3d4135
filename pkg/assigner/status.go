package assigner

import (
	"errors"
	"net/netip"
)

// Ready says whether an ADD could work now: the state directory writable,
// the holder ours or creatable, and the LAN able to reach external IPs of
// the families in use. It adopts no device and marks none; of the state
// directory it only tests that it can be written.
func (a *Assigner) Ready(v4, v6 bool) error {
	if err := a.st.writable(); err != nil {
		return err
	}
	if _, err := a.findHolder(); err != nil {
		return err
	}
	var errs []error
	if v4 {
		errs = append(errs, a.readyFamily(netip.IPv4Unspecified()))
	}
	if v6 {
		errs = append(errs, a.readyFamily(netip.IPv6Unspecified()))
	}
	return oneLine(errors.Join(errs...))
}

// readyFamily checks the configured uplink, or the default route's.
func (a *Assigner) readyFamily(any netip.Addr) error {
	if a.opts.Uplink != "" {
		up, err := a.ups.byName(a.opts.Uplink)
		if err != nil {
			return err
		}
		return a.k.reachable(up, any.Is6())
	}
	r, err := a.k.mainRoute(any)
	if err != nil || r.dev == 0 {
		// No default route: uplinks come from connected routes per IP, and
		// ADD checks each; only the node-wide ARP setting can be judged here.
		if any.Is6() {
			return nil
		}
		return a.k.reachable(Uplink{Name: "all"}, false)
	}
	up, err := a.ups.byIndex(r.dev)
	if err != nil {
		return err
	}
	return a.k.reachable(up, any.Is6())
}

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
}

// IPReport is one held IP.
type IPReport struct {
	Addr     netip.Addr   `json:"ip"`
	Uplink   string       `json:"uplink"`
	Holders  []Attachment `json:"holders"`
	OnDevice bool         `json:"onDevice"`
	Proxy    *bool        `json:"proxyNeighbour,omitempty"`
}

// Report reads the state and the holder; it changes nothing.
func (a *Assigner) Report() (*Report, error) {
	rep := &Report{Device: a.opts.Device, StateDir: a.st.dir, IPs: []IPReport{}, Drift: []string{}}
	if !a.st.exists() {
		rep.Holder, _ = a.holderState()
		return rep, nil
	}
	l, err := a.lock()
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	rep.Pending = fileExists(a.st.journalPath())
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
	return rep, nil
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
