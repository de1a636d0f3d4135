package assigner

import (
	"errors"
	"net/netip"
	"os"
)

// Ready says whether an ADD could work now: the state directory writable,
// the holder ours or creatable, and the LAN able to reach external IPs of
// the families in use. It changes nothing but the state directory's
// existence.
func (a *Assigner) Ready(v4, v6 bool) error {
	if err := a.st.init(); err != nil {
		return err
	}
	f, err := os.CreateTemp(a.st.tmpDir(), "status.*")
	if err != nil {
		return kindf(ErrState, "state directory %s: is not writable: %w", a.st.dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := a.k.holder(a.opts.Device, false, fileExists(a.st.creatingPath())); err != nil {
		return err
	}
	var errs []error
	if v4 {
		errs = append(errs, a.readyFamily(netip.IPv4Unspecified()))
	}
	if v6 {
		errs = append(errs, a.readyFamily(netip.IPv6Unspecified()))
	}
	return errors.Join(errs...)
}

// readyFamily checks the configured uplink, or the default route's.
func (a *Assigner) readyFamily(any netip.Addr) error {
	ups := uplinkCache{k: a.k}
	if a.opts.Uplink != "" {
		up, err := ups.byName(a.opts.Uplink)
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
	up, err := ups.byIndex(r.dev)
	if err != nil {
		return err
	}
	return a.k.reachable(up, any.Is6())
}
