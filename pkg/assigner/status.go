package assigner

// The CNI STATUS verb: whether an ADD could work now. The CLI's report of
// what is held is in report.go.

import (
	"errors"
	"net/netip"
)

// Ready says whether an ADD could work now: the state directory writable,
// the holder ours or creatable, and the LAN able to reach external IPs of
// the families in use. It adopts no device and marks none; of the state
// directory it only tests that it can be written.
func (a *Assigner) Ready(v4, v6 bool) error {
	a.startCall()
	if err := a.st.Writable(); err != nil {
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
	errs = append(errs, a.readyNAT())
	return oneLine(errors.Join(errs...))
}

// readyFamily checks the configured uplink, or the default route's.
func (a *Assigner) readyFamily(any netip.Addr) error {
	if a.opts.Uplink != "" {
		up, err := a.ups.byName(a.opts.Uplink)
		if err != nil {
			return err
		}
		return a.k.reachable(up, any.Is6(), a.holding())
	}
	r, err := a.k.mainRoute(any, 0)
	if err != nil || r.dev == 0 {
		// No default route: uplinks come from connected routes per IP, and
		// ADD checks each; only the node-wide ARP setting can be judged here.
		if any.Is6() {
			return nil
		}
		return a.k.reachable(Uplink{Name: "all"}, false, a.holding())
	}
	up, err := a.ups.byIndex(r.dev)
	if err != nil {
		return err
	}
	return a.k.reachable(up, any.Is6(), a.holding())
}
