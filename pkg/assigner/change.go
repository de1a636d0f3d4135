package assigner

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/standing"
	"github.com/external-ip/external-ip/pkg/store"
)

// mode is how a journaled change is carried out. The entry point that
// carries it out says which (Add, Del and GC run it first; an ADD that
// fails undoes it at once; the next invocation replays what a crash left
// in the journal), and the steps that differ ask it, where the reader
// sees why. A new way of holding an IP changes how a step is done (the
// holder's Hold and Unhold, heldAs), not the mode.
type mode int

const (
	// firstRun: the invocation that journaled the change carries it out.
	firstRun mode = iota
	// undoing: a failed ADD is undone at once by its own invocation.
	undoing
	// replaying: the next invocation settles a change that a killed one
	// left in the journal: an ADD undone, a release finished.
	replaying
)

// afterFault says whether the change follows a fault (an undo or a
// replay): only then are routes left without a chain looked for, which
// reads every table of ours (uplinkroute.Change.AfterFault).
func (m mode) afterFault() bool { return m != firstRun }

// dropsSharedHairpins says whether the change removes the hairpin subnets
// it no longer uses: only the undoing of a failed ADD does, so that it
// leaves no trace on an otherwise empty node (keepSharedHairpins).
func (m mode) dropsSharedHairpins() bool { return m == undoing }

// change is one journaled change being carried out (apply), and how: its
// mode, and what the run learns on its way.
type change struct {
	*Assigner
	j    *journal
	mode mode
	// put collects the IPs this run put on the holder, which an undoing
	// of it may take off again; untouched, for an undoing, lists the IPs
	// whose address and proxy entry were not there before the ADD and
	// that the ADD never put there: there is nothing to take off the
	// kernel for them (adding.undo).
	put, untouched map[netip.Addr]bool
	// quiet lists the IPs with only standby holders here, before and
	// after: nothing of theirs is on the kernel or in the table.
	quiet map[netip.Addr]bool
	// goodbye: a first run's release of a record that stands by.
	goodbye bool
}

// newChange is j, to be carried out in mode.
func (a *Assigner) newChange(j *journal, m mode) *change {
	return &change{Assigner: a, j: j, mode: m, put: map[netip.Addr]bool{}, quiet: map[netip.Addr]bool{}}
}

// apply carries out a journaled change. Every step is idempotent, so
// replaying a journal after a crash at any step ends in the same state.
func (c *change) apply() error {
	j := c.j
	hold, standby := standing.Roles(j.Record)
	var dev int
	var err error
	if j.Record != nil {
		if dev, err = c.holder.Ensure(); err != nil {
			return err
		}
		err = c.st.WriteRecord(j.Key, j.Record)
	} else {
		// A release never creates the device, and never touches a device
		// that has stopped being ours: it only forgets.
		if dev, err = c.holder.ForRelease(); err == nil {
			err = c.st.RemoveRecord(j.Key)
		}
	}
	if err != nil {
		return err
	}
	c.step("record")
	var errs []error
	w := &written{st: c.st, key: j.Key, record: j.Record, holders: map[netip.Addr][]string{}, uplinks: map[netip.Addr]string{}}
	for _, ip := range j.Touch {
		if err := c.applyIP(dev, ip, hold[ip], standby[ip], w); err != nil {
			if j.Record != nil {
				return err
			}
			errs = append(errs, err) // a release keeps going
		}
	}
	errs = append(errs, c.steer(w))
	return errors.Join(errs...)
}

// applyIP adds or removes the journal's attachment as a holder of ip, then
// makes the kernel match: the address (or route) is on the holder while it
// is held. Once ip's index entry is stored, w has its holders.
func (c *change) applyIP(dev int, ip netip.Addr, hold, standby bool, w *written) error {
	j := c.j
	e, err := c.st.ReadIP(ip)
	if err != nil {
		return err
	}
	holders, changed := store.WithHolder(e.Holders, j.Key, hold)
	waiting, moved := store.WithHolder(e.Standby, j.Key, standby)
	changed = changed || moved
	// Undoing a re-homing takes away the proxy entry the ADD made on the
	// new uplink; an ADD run first says whose entry it finds on a new one.
	e, moved, made := j.Rehome(ip, e)
	changed = changed || moved
	if made != "" {
		if err := c.holder.Unhold(0, ip, ipEntry{Uplink: made, Route: e.Route}); err != nil {
			return err
		}
	}
	if hold && c.mode == firstRun && !e.KeepProxy && slices.Contains(j.Proxied, ip) {
		e.KeepProxy, changed = true, true
	}
	w.uplinks[ip] = e.Uplink
	if len(holders) == 0 {
		if err := c.release(dev, ip, e, waiting, standby); err != nil {
			return err
		}
		w.holders[ip] = nil
		return nil
	}
	e.Standby = waiting
	if hold {
		switched, err := c.holdAs(dev, ip, &e, j.Key, j.Record.Route)
		if err != nil {
			return err
		}
		changed = changed || switched
	}
	e.Holders = holders
	if changed {
		if err := c.st.WriteIP(ip, e); err != nil {
			return err
		}
		c.step("index")
	}
	w.holders[ip] = holders
	if !hold {
		return nil
	}
	return c.hold(dev, ip, e)
}

// holdAs decides how ip is held, in e, when key holds it the way want
// says: one IP is held one way on a node at a time. The record that takes
// it first decides; a record that is its only holder switches it (a
// re-ADD after the config changed, or undoing one), after taking the other
// way's objects off the kernel; while others hold it, it stays as it is
// and the next GC switches it once every holder asks the other way.
func (c *change) holdAs(dev int, ip netip.Addr, e *ipEntry, key string, want heldAs) (bool, error) {
	switch {
	case e.Route == want:
		return false, nil
	case len(e.Holders) == 0:
		e.Route = want
		return true, nil
	case len(e.Holders) == 1 && e.Holders[0] == key:
		if err := c.holder.Unhold(dev, ip, *e); err != nil {
			return false, err
		}
		c.log.Info("hold switched", "ip", ip, "from", e.Route.String(), "to", want.String())
		e.Route = want
		return true, nil
	}
	c.log.Warn("held the other way by other attachments; kept as it is until every holder asks the same", "ip", ip, "held", e.Route.String(), "asked", want.String())
	return false, nil
}

// hold puts ip on the holder as e says (host.Holder.Hold), keeping what
// this run put there: an ADD undone takes away only that.
func (c *change) hold(dev int, ip netip.Addr, e ipEntry) error {
	added, err := c.holder.Hold(dev, ip, e)
	if added {
		c.put[ip] = true
	}
	return err
}

// release takes an IP nobody holds actively off the holder and out of
// the index, which keeps its standby holders (waiting) and its uplink for
// them; one whose address and proxy entry the undone ADD never put there
// (untouched), or that had only standby holders here and has now (quiet),
// only changes in the index. A proxy entry the ADD undone found there
// stays, also when a crash came before its index said so.
func (c *change) release(dev int, ip netip.Addr, e ipEntry, waiting []string, standby bool) error {
	left, quiet := standing.Left(e, waiting, standby)
	c.quiet[ip] = quiet
	if c.untouched[ip] || c.quiet[ip] {
		return c.st.WriteIP(ip, left)
	}
	e.KeepProxy = e.KeepProxy || slices.Contains(c.j.Proxied, ip)
	if err := c.holder.Unhold(dev, ip, e); err != nil {
		return err
	}
	if up, err := c.ups.ByName(e.Uplink); err == nil && c.opts.Goodbye != nil && c.goodbye {
		c.opts.Goodbye(Placed{Addr: ip, Uplink: up}.target())
	}
	return c.st.WriteIP(ip, left)
}

// release takes an IP nobody holds off the holder and its proxy entry off
// the uplink, as e says it is held, and out of the index.
func (a *Assigner) release(dev int, ip netip.Addr, e ipEntry) error {
	if err := a.holder.Unhold(dev, ip, e); err != nil {
		return err
	}
	return a.st.WriteIP(ip, ipEntry{})
}
