package host

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/store"
)

// Hold puts ip on the holder dev as e says (an address, or a route of
// its protocol number), and its proxy entry on e's uplink where the LAN
// needs one (NeedsProxy). It says whether it put the address or route
// there: what an ADD put is its own to take away when it is undone.
func (h *Holder) Hold(dev int, ip netip.Addr, e store.IPEntry) (bool, error) {
	var added bool
	var err error
	if e.Route.Route() {
		added, err = h.addRoute(dev, ip, e.Route)
	} else {
		added, err = h.k.AddAddr(dev, ip)
	}
	if err != nil {
		return false, err
	}
	if added {
		h.Log.Info(e.Route.String()+" added", "ip", ip)
	}
	h.Step("address")
	if NeedsProxy(ip, e.Route) && e.Uplink != "" {
		err := h.k.AddProxy(e.Uplink, ip)
		if errors.Is(err, ErrNoLink) {
			// The uplink went, and no entry can be on it: the next ADD or
			// GC re-homes the IP. Failing here would wedge every replay.
			h.Log.Warn("uplink gone; no proxy entry until the IP is re-homed", "ip", ip, "uplink", e.Uplink)
			return added, nil
		}
		return added, err
	}
	return added, nil
}

// addRoute puts ip's host route through the holder dev. The kernel's
// EEXIST says only that a route to ip of the same metric is there: ours,
// or another program's that came after screening. What the kernel uses is
// then asked, so that an ADD never succeeds holding nothing.
func (h *Holder) addRoute(dev int, ip netip.Addr, how store.HeldAs) (bool, error) {
	added, err := h.k.AddRoute(dev, ip, int(how))
	if err != nil || added {
		return added, err
	}
	r, err := h.k.Lookup(ip)
	if err != nil {
		return false, err
	}
	if r.On(ip) != dev {
		return false, h.refuseRoute(ip, r)
	}
	return false, nil
}

// Unhold takes ip's address or route off the holder dev (none when dev is
// 0: the holder is missing or not ours) and its proxy entry off e's
// uplink, as e says it is held; a proxy entry that another program made
// (e.KeepProxy) stays.
func (h *Holder) Unhold(dev int, ip netip.Addr, e store.IPEntry) error {
	if dev != 0 {
		var removed bool
		var err error
		if e.Route.Route() {
			removed, err = h.k.DelRoute(dev, ip)
		} else {
			removed, err = h.k.DelAddr(dev, ip)
		}
		if err != nil {
			return err
		}
		if removed {
			h.Log.Info(e.Route.String()+" removed", "ip", ip)
		}
	}
	h.Step("address")
	if !NeedsProxy(ip, e.Route) || e.Uplink == "" {
		return nil
	}
	if e.KeepProxy {
		h.Log.Info("proxy neighbour kept: another program made it", "ip", ip, "uplink", e.Uplink)
		return nil
	}
	return h.k.DelProxy(e.Uplink, ip)
}

// ProxyThere says whether a proxy entry for ip is on uplink already,
// before this invocation needs one: asked before the change that makes
// it, since adding a proxy entry that is there succeeds and tells nothing.
func (h *Holder) ProxyThere(uplink string, ip netip.Addr) (bool, error) {
	return h.k.HasProxy(uplink, ip)
}

// CheckOn fails, with ErrDrift, when ip is not on the holder dev the way
// how says: its address, or its host route of how's protocol number.
func (h *Holder) CheckOn(dev int, ip netip.Addr, how store.HeldAs) error {
	r, err := h.k.Lookup(ip)
	if err != nil {
		return err
	}
	if how.Route() {
		if r.Local != 0 || r.On(ip) != dev || r.Proto != int(how) {
			return errorf(ErrDrift, "%s: has no route through holder device %s with protocol %d", ip, h.Name, how)
		}
		return nil
	}
	if r.Local != dev {
		if on, err := h.onHolder(dev, ip); err != nil || !on {
			return cmp.Or(err, errorf(ErrDrift, "%s: is not on holder device %s", ip, h.Name))
		}
	}
	return nil
}

// onHolder asks the holder's address list, only when the FIB said no: the
// kernel puts an IPv6 address's local route in place from a work queue,
// a moment after the address, so a CHECK right after ADD can ask too soon.
func (h *Holder) onHolder(dev int, ip netip.Addr) (bool, error) {
	addrs, err := h.k.HolderAddrs(dev)
	return slices.Contains(addrs, ip), err
}

// Carried is what the holder carries: its addresses, and its host routes
// with their protocol numbers.
type Carried struct {
	Addrs  map[netip.Addr]bool
	Routes map[netip.Addr]int
}

// Carried lists what the holder dev carries (none for dev 0), for GC and
// status: the only callers that list the holder's addresses.
func (h *Holder) Carried(dev int) (Carried, error) {
	c := Carried{Addrs: map[netip.Addr]bool{}, Routes: map[netip.Addr]int{}}
	if dev == 0 {
		return c, nil
	}
	addrs, err := h.k.HolderAddrs(dev)
	if err != nil {
		return c, err
	}
	for _, ip := range addrs {
		c.Addrs[ip] = true
	}
	c.Routes, err = h.k.HolderRoutes(dev)
	return c, err
}

// Holds says whether the holder carries ip the way how says it is held.
func (c Carried) Holds(ip netip.Addr, how store.HeldAs) bool {
	if how.Route() {
		return c.Routes[ip] == int(how)
	}
	return c.Addrs[ip]
}

// Sweep removes the addresses and routes on the holder dev that stray
// says are not held so (by no one, or the other way: what a switch of
// hold that a crash interrupted leaves), then the proxy entries of the IPs
// on it that held says nobody holds. Only GC sweeps: the holder is ours
// alone, so whatever is on it and unheld is a leak.
func (h *Holder) Sweep(dev int, held func(netip.Addr) bool, stray func(ip netip.Addr, route bool) bool) error {
	if dev == 0 {
		return nil
	}
	addrs, err := h.k.HolderAddrs(dev)
	if err != nil {
		return err
	}
	routes, err := h.k.HolderRoutes(dev)
	if err != nil {
		return err
	}
	var errs []error
	for _, ip := range addrs {
		if stray(ip, false) {
			errs = append(errs, h.dropStray(ip, "address", func() (bool, error) { return h.k.DelAddr(dev, ip) }))
		}
	}
	var unheld []netip.Addr
	for ip := range routes {
		if stray(ip, true) {
			errs = append(errs, h.dropStray(ip, "route", func() (bool, error) { return h.k.DelRoute(dev, ip) }))
		}
	}
	for _, ip := range addrs {
		if !held(ip) {
			unheld = append(unheld, ip)
		}
	}
	for ip := range routes {
		if !held(ip) && !slices.Contains(unheld, ip) {
			unheld = append(unheld, ip)
		}
	}
	return errors.Join(append(errs, h.dropStrayProxies(unheld))...)
}

func (h *Holder) dropStray(ip netip.Addr, what string, del func() (bool, error)) error {
	removed, err := del()
	if removed {
		h.Log.Info("stray "+what+" removed", "ip", ip)
	}
	return err
}

// dropStrayProxies removes the proxy entries of IPs that were on the holder
// unheld. They are ours wherever they are: an address or route on our
// holder is ours, and so is the entry that makes the LAN reach it.
func (h *Holder) dropStrayProxies(ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	entries, err := h.k.ProxyEntries()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(ips, e.IP) {
			continue
		}
		err := h.k.DelProxy(e.Link, e.IP)
		if err == nil {
			h.Log.Info("stray proxy neighbour removed", "ip", e.IP, "uplink", e.Link)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StrayProxies lists the proxy entries of ips, which no record holds, for
// status to name.
func (h *Holder) StrayProxies(ips []netip.Addr) ([]ProxyEntry, error) {
	if len(ips) == 0 {
		return nil, nil
	}
	entries, err := h.k.ProxyEntries()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(entries, func(e ProxyEntry) bool { return !slices.Contains(ips, e.IP) }), nil
}
