package assigner

import (
	"errors"
	"net/netip"
)

// apply carries out a journaled change. Every step is idempotent, so
// replaying a journal after a crash at any step ends in the same state.
func (a *Assigner) apply(j *journal) error {
	hold := map[netip.Addr]bool{}
	var dev int
	var err error
	if j.Record != nil {
		for _, ip := range j.Record.IPs {
			hold[ip] = true
		}
		if dev, err = a.ensureHolder(); err != nil {
			return err
		}
		err = a.st.writeJSON(inAtt, recordName(j.Key), j.Record)
	} else {
		// A release never creates the device, and never touches a device
		// that has stopped being ours: it only forgets.
		if dev, err = a.releaseHolder(); err == nil {
			err = a.st.remove(inAtt, recordName(j.Key))
		}
	}
	if err != nil {
		return err
	}
	a.step("record")
	var errs []error
	w := &written{key: j.Key, record: j.Record, holders: map[netip.Addr][]string{}, uplinks: map[netip.Addr]string{}}
	for _, ip := range j.Touch {
		if err := a.applyIP(dev, j, ip, hold[ip], w); err != nil {
			if j.Record != nil {
				return err
			}
			errs = append(errs, err) // a release keeps going
		}
	}
	errs = append(errs, a.steer(j, w))
	return errors.Join(errs...)
}

// applyIP adds or removes the journal's attachment as a holder of ip, then
// makes the kernel match: the address is on the holder while it is held.
// Once ip's index entry is stored, w has its holders.
func (a *Assigner) applyIP(dev int, j *journal, ip netip.Addr, hold bool, w *written) error {
	e, err := a.st.readIP(ip)
	if err != nil {
		return err
	}
	holders, changed := withHolder(e.Holders, j.Key, hold)
	e.Holders = holders
	// A new uplink for an IP that had none, or whose uplink vanished.
	if up := j.Uplinks[ip]; up != "" && e.Uplink != up {
		e.Uplink, changed = up, true
	}
	w.uplinks[ip] = e.Uplink
	if len(holders) == 0 {
		if err := a.release(dev, ip, e); err != nil {
			return err
		}
		w.holders[ip] = nil
		return nil
	}
	if changed {
		if err := a.st.writeIP(ip, e); err != nil {
			return err
		}
		a.step("index")
	}
	w.holders[ip] = holders
	if !hold {
		return nil
	}
	return a.hold(dev, ip, e.Uplink)
}

// hold puts ip on the holder, and for IPv6 its proxy entry on the uplink.
func (a *Assigner) hold(dev int, ip netip.Addr, uplink string) error {
	added, err := a.k.addAddr(dev, ip)
	if err != nil {
		return err
	}
	if added {
		a.log.Info("address added", "ip", ip)
		if a.put == nil {
			a.put = map[netip.Addr]bool{}
		}
		a.put[ip] = true
	}
	a.step("address")
	if ip.Is6() && uplink != "" {
		err := a.k.addProxy(uplink, ip)
		if errors.Is(err, errNoLink) {
			// The uplink went, and no entry can be on it: the next ADD or
			// GC re-homes the IP. Failing here would wedge every replay.
			a.log.Warn("uplink gone; no proxy entry until the IP is re-homed", "ip", ip, "uplink", uplink)
			return nil
		}
		return err
	}
	return nil
}

// release takes an IP nobody holds off the holder and out of the index.
func (a *Assigner) release(dev int, ip netip.Addr, e ipEntry) error {
	if a.undoing && a.fresh[ip] && !a.put[ip] {
		// Neither the address nor its proxy entry was there before this
		// ADD, and it never put them there.
		return a.st.writeIP(ip, ipEntry{})
	}
	if dev != 0 {
		removed, err := a.k.delAddr(dev, ip)
		if err != nil {
			return err
		}
		if removed {
			a.log.Info("address removed", "ip", ip)
		}
	}
	a.step("address")
	if ip.Is6() && e.Uplink != "" {
		if err := a.k.delProxy(e.Uplink, ip); err != nil {
			return err
		}
	}
	return a.st.writeIP(ip, ipEntry{})
}
