package assigner

import (
	"errors"
	"net/netip"
	"slices"
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
		if dev, err = a.holder.Ensure(); err != nil {
			return err
		}
		err = a.st.WriteRecord(j.Key, j.Record)
	} else {
		// A release never creates the device, and never touches a device
		// that has stopped being ours: it only forgets.
		if dev, err = a.holder.ForRelease(); err == nil {
			err = a.st.RemoveRecord(j.Key)
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
// makes the kernel match: the address (or route) is on the holder while it
// is held. Once ip's index entry is stored, w has its holders.
func (a *Assigner) applyIP(dev int, j *journal, ip netip.Addr, hold bool, w *written) error {
	e, err := a.st.ReadIP(ip)
	if err != nil {
		return err
	}
	holders, changed := withHolder(e.Holders, j.Key, hold)
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
	if hold {
		switched, err := a.holdAs(dev, ip, &e, j.Key, j.Record.Route)
		if err != nil {
			return err
		}
		changed = changed || switched
	}
	e.Holders = holders
	if changed {
		if err := a.st.WriteIP(ip, e); err != nil {
			return err
		}
		a.step("index")
	}
	w.holders[ip] = holders
	if !hold {
		return nil
	}
	return a.hold(dev, ip, e)
}

// holdAs decides how ip is held, in e, when key holds it the way want
// says: one IP is held one way on a node at a time. The record that takes
// it first decides; a record that is its only holder switches it (a
// re-ADD after the config changed, or undoing one), after taking the other
// way's objects off the kernel; while others hold it, it stays as it is
// and the next GC switches it once every holder asks the other way.
func (a *Assigner) holdAs(dev int, ip netip.Addr, e *ipEntry, key string, want heldAs) (bool, error) {
	switch {
	case e.Route == want:
		return false, nil
	case len(e.Holders) == 0:
		e.Route = want
		return true, nil
	case len(e.Holders) == 1 && e.Holders[0] == key:
		if err := a.unhold(dev, ip, *e); err != nil {
			return false, err
		}
		a.log.Info("hold switched", "ip", ip, "from", e.Route.String(), "to", want.String())
		e.Route = want
		return true, nil
	}
	a.log.Warn("held the other way by other attachments; kept as it is until every holder asks the same", "ip", ip, "held", e.Route.String(), "asked", want.String())
	return false, nil
}

// hold puts ip on the holder as e says (host.Holder.Hold), keeping what
// this call put there: an ADD undone takes away only that.
func (a *Assigner) hold(dev int, ip netip.Addr, e ipEntry) error {
	added, err := a.holder.Hold(dev, ip, e.Route, e.Uplink)
	if added {
		if a.put == nil {
			a.put = map[netip.Addr]bool{}
		}
		a.put[ip] = true
	}
	return err
}

// release takes an IP nobody holds off the holder and out of the index.
func (a *Assigner) release(dev int, ip netip.Addr, e ipEntry) error {
	if a.undoing && a.fresh[ip] && !a.put[ip] {
		// Neither the address nor its proxy entry was there before this
		// ADD, and it never put them there.
		return a.st.WriteIP(ip, ipEntry{})
	}
	if err := a.unhold(dev, ip, e); err != nil {
		return err
	}
	return a.st.WriteIP(ip, ipEntry{})
}

// unhold takes ip off the holder and its proxy entry off the uplink, as e
// says it is held.
func (a *Assigner) unhold(dev int, ip netip.Addr, e ipEntry) error {
	return a.holder.Unhold(dev, ip, e.Route, e.Uplink)
}

// withHolder returns holders with key added or removed, sorted, and whether
// it changed.
func withHolder(holders []string, key string, hold bool) ([]string, bool) {
	i, found := slices.BinarySearch(holders, key)
	switch {
	case hold && !found:
		return slices.Insert(slices.Clone(holders), i, key), true
	case !hold && found:
		return slices.Delete(slices.Clone(holders), i, i+1), true
	}
	return holders, false
}
