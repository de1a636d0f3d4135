package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/standing"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// Add records that att holds ips and makes sure each is on the holder
// device, replacing att's earlier record; ann (nil: none) probes the LAN
// for the IPs this node takes first, and announces them all. On error att
// keeps what it held before: its earlier record, or none.
func (a *Assigner) Add(att Attachment, ips []netip.Addr, ann Announcer) ([]Placed, error) {
	a.startCall()
	// A record lists each IP once, or GC would count it twice.
	ad := &adding{Assigner: a, att: att, ips: union(nil, ips), ann: ann, standby: standing.Of(a.opts.InStandby)}
	if len(ad.ips) == 0 {
		return nil, nil
	}
	if err := ad.screen(); err != nil {
		return nil, err
	}
	// Probing waits for the LAN, so it runs before the lock, which every
	// other invocation on the node needs.
	if err := ad.probe(); err != nil {
		return nil, err
	}
	l, err := a.st.Lock(store.MakeAll, a.opts.LockTimeout)
	if err != nil {
		return nil, errkind.OneLine(err)
	}
	defer l.Unlock()
	if err := a.recover(); err != nil {
		return nil, errkind.OneLine(err)
	}
	if err := ad.checkOwner(); err != nil {
		return nil, errkind.OneLine(err)
	}
	placed, err := ad.add()
	return placed, errkind.OneLine(err)
}

// adding is one ADD on its way down: the request, what screening found of
// each IP before the lock (its route), and what placement decided under
// it. A new kind of request (IPs claimed from a pool, say) is a type like
// it, built by its own verb, that ends in a journaled change.
type adding struct {
	*Assigner
	att    Attachment
	ips    []netip.Addr
	ann    Announcer
	routes map[netip.Addr]host.Route
	placed []Placed
	// wasOn is the uplink each held IP that this ADD re-homed had before.
	wasOn map[netip.Addr]string
	// fresh lists the IPs that were on no interface when screened and that
	// this ADD gives their first holder: until this invocation puts one on
	// the holder, undoing the ADD has nothing to take off the kernel for
	// it, which matters when the kernel refuses every change (no
	// CAP_NET_ADMIN).
	fresh map[netip.Addr]bool
	// standby lists the IPs the ADD holds in standby.
	standby standing.Set
}

// screen refuses, before anything changes, what this host cannot take:
// the IPs (host.Holder.Screen) and, when the ADD steers, a container
// address that the node itself holds.
func (ad *adding) screen() error {
	routes, err := ad.holder.Screen(ad.ups, ad.how, ad.ips)
	if err != nil {
		return err
	}
	ad.routes = routes
	return ad.screenContainer()
}

// add carries the ADD out under the lock: the IPs placed, the change
// journaled and applied, the IPs announced.
func (ad *adding) add() ([]Placed, error) {
	// Under the lock: the holder screening saw missing may have been made
	// by another invocation meanwhile.
	if _, err := ad.holder.Ensure(); err != nil {
		return nil, err
	}
	key := ad.att.Key()
	old, err := ad.st.ReadRecord(key)
	if err != nil {
		return nil, err
	}
	rec := &record{Attachment: ad.att, Route: ad.how}
	rec.Owner, rec.Owned = ad.owns()
	rec.Netns = ad.opts.Netns
	if ad.opts.Move && !standing.Moves(old, rec, ad.ips) {
		return nil, nil
	}
	uplinks, proxied, err := ad.place()
	if err != nil {
		return nil, err
	}
	ad.standby.Fill(rec, ad.ips, ad.opts.Standby)
	rec.Steering = ad.newSteering()
	if err := steer.ScreenEgress(ad.opts.NAT, ad.att, rec.Steering, ad.otherHolders); err != nil {
		return nil, err
	}
	j := &journal{Op: store.OpAdd, Key: key, Record: rec, Touch: slices.Clone(ad.ips), Uplinks: uplinks, Proxied: proxied}
	if old != nil {
		if err := ad.remember(j, old); err != nil {
			return nil, err
		}
	}
	ad.fresh = fresh(ad.placed, ad.routes)
	if err := ad.journaled(j); err != nil {
		return nil, err
	}
	ad.log.Info("added", "attachment", ad.att.String(), "ips", ad.ips)
	// The ADD is done and stays: failing now would tell the runtime it
	// failed while its record holds the IPs.
	// The stale rules are drift that CHECK reports and GC mends.
	if err := ad.followReHomed(key); err != nil {
		ad.log.Warn("egress of the other holders not moved to the re-homed uplink; the next GC moves it", "error", errkind.OneLine(err))
	}
	return ad.placed, nil
}

// journaled carries out the ADD's journal, run for the first time, and
// announces. The journal stays until the ADD has succeeded, announcement
// and all: an invocation killed before that is rolled back by the next
// one, and a failure here is undone at once.
func (ad *adding) journaled(j *journal) error {
	if err := ad.begin(j); err != nil {
		return err
	}
	run := ad.newChange(j, firstRun)
	if err := run.apply(); err != nil {
		return ad.undo(run, err)
	}
	if ad.ann != nil {
		var targets []announce.Target
		for _, p := range ad.placed {
			if !p.Standby {
				targets = append(targets, p.target())
			}
		}
		if err := ad.ann.Announce(targets); err != nil {
			return ad.undo(run, err)
		}
	}
	ad.step("done")
	if err := ad.st.Remove(store.JournalFile); err != nil {
		return ad.undo(run, err)
	}
	return nil
}

// undo gives the attachment back what it held before a failed ADD (its
// earlier record, or none), so that a failed ADD, like a refused one,
// leaves the state as it found it and no address nobody holds; then it
// drops the ADD's journal. It takes off the kernel only what the ADD's
// run put there (its fresh IPs it never put are left alone). If it
// cannot, the journal stays and the next invocation undoes the ADD.
func (ad *adding) undo(run *change, cause error) error {
	u := ad.newChange(run.j.Reverse(), undoing)
	u.untouched = map[netip.Addr]bool{}
	for ip := range ad.fresh {
		if !run.put[ip] {
			u.untouched[ip] = true
		}
	}
	err := u.apply()
	if err == nil {
		err = ad.st.Remove(store.JournalFile)
	}
	if err != nil {
		return fmt.Errorf("%w; rolling back also failed: %s; the next invocation rolls it back", cause, errkind.OneLine(err))
	}
	return cause
}

// fresh lists the IPs that were on no interface when screened and that
// this ADD gives their first holder (adding.fresh).
func fresh(placed []Placed, routes map[netip.Addr]host.Route) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, p := range placed {
		if p.First && routes[p.Addr].On(p.Addr) == 0 {
			out[p.Addr] = true
		}
	}
	return out
}

// probe asks the LAN, all at once, about every IP that is not yet on the
// holder: only those could be taking an address another host uses.
func (ad *adding) probe() error {
	if ad.ann == nil || ad.opts.Probe <= 0 {
		return nil
	}
	// Every uplink first, so that no probe is left running on an early return.
	var todo []Placed
	for _, ip := range ad.ips {
		if r := ad.routes[ip]; r.On(ip) == 0 && !ad.standby[ip] {
			up, err := ad.ups.For(ip, r)
			if err != nil {
				return err
			}
			if ad.cutOff(ip, up) {
				continue
			}
			todo = append(todo, Placed{Addr: ip, Uplink: up, First: true})
		}
	}
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, p := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ad.ann.Probe(p.target(), ad.opts.Probe)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !ad.standsBy(todo[i].Addr, err) {
			return err
		}
	}
	return nil
}

// remember keeps in a re-ADD's journal what undoing it restores: the
// earlier record, with its IPs' index entries as they are now (an IP the
// new record drops is released, and its index forgotten, before an undo
// re-holds it: its uplink, and whether its proxy entry is another
// program's, come back from the journal).
func (ad *adding) remember(j *journal, old *record) error {
	j.Touch = union(old.Held(), j.Touch)
	j.Old, j.OldUplinks, j.OldIPs = old, map[netip.Addr]string{}, map[netip.Addr]ipEntry{}
	for _, ip := range old.Held() {
		e, err := ad.st.ReadIP(ip)
		if err != nil {
			return err
		}
		j.OldUplinks[ip], j.OldIPs[ip] = e.Uplink, e
	}
	return nil
}

// place decides, under the lock, each IP's uplink and whether this ADD
// gives it its first holder (ad.placed), and returns the uplinks it chose
// anew, which the journal records, and the IPs whose proxy entry another
// program made there before (proxiedBefore). An IP that is already held
// keeps the uplink it was first announced on, so its proxy entry is
// removed from the right place.
func (ad *adding) place() (map[netip.Addr]string, []netip.Addr, error) {
	ad.placed, ad.wasOn = make([]Placed, 0, len(ad.ips)), map[netip.Addr]string{}
	chosen := map[netip.Addr]string{}
	var proxied []netip.Addr
	for _, ip := range ad.ips {
		e, err := ad.st.ReadIP(ip)
		if err != nil {
			return nil, nil, err
		}
		up, rechosen, err := ad.placeIP(ip, e)
		if err == nil && ad.proxyNew(ip, e, rechosen) {
			var there bool
			if there, err = ad.holder.ProxyThere(up.Name, ip); there {
				proxied = append(proxied, ip)
			}
		}
		if err != nil {
			return nil, nil, host.AboutIP(ip, err)
		}
		if rechosen {
			chosen[ip] = up.Name
		}
		if rechosen && len(e.Holders) > 0 {
			ad.wasOn[ip] = e.Uplink
		}
		ad.placed = append(ad.placed, Placed{Addr: ip, Uplink: up, First: len(e.Holders) == 0, Standby: ad.standby[ip]})
	}
	return chosen, proxied, nil
}

// proxyNew says whether this ADD may give ip a proxy entry on its uplink
// that the IP's holders had not: held as it asks or as it is held, on an
// uplink chosen anew or as it was not held before. An entry found there
// then is another program's.
func (ad *adding) proxyNew(ip netip.Addr, e ipEntry, rechosen bool) bool {
	if len(e.Holders) > 0 && !rechosen && host.NeedsProxy(ip, e.Route) {
		return false
	}
	return host.NeedsProxy(ip, ad.how) || len(e.Holders) > 0 && host.NeedsProxy(ip, e.Route)
}

// placeIP is ip's uplink: the one it was first announced on while it is
// held, else (also when that uplink vanished) the one its route names now,
// which the journal then records.
func (ad *adding) placeIP(ip netip.Addr, e ipEntry) (host.Uplink, bool, error) {
	if len(e.Holders)+len(e.Standby) > 0 && e.Uplink != "" {
		up, err := ad.ups.ByName(e.Uplink)
		if !errors.Is(err, host.ErrNoLink) {
			return up, false, err
		}
		ad.log.Warn("uplink of a held IP is gone; choosing another", "ip", ip, "uplink", e.Uplink)
	}
	up, err := ad.ups.For(ip, ad.routes[ip])
	return up, true, err
}

// screenContainer refuses steering when prevResult names, as the
// container's, an address the node itself holds (host.Holder.ScreenContainer).
func (ad *adding) screenContainer() error {
	if !ad.steers() {
		return nil
	}
	return ad.holder.ScreenContainer(ad.opts.Container)
}

// newSteering is the ADD's steering (steer.Decide), when it steers.
func (ad *adding) newSteering() *steering {
	if !ad.steers() {
		return nil
	}
	uplinks := map[netip.Addr]string{}
	for _, p := range ad.placed {
		uplinks[p.Addr] = p.Uplink.Name
	}
	return steer.Decide(ad.opts.Traffic, ad.opts.Container, ad.standby.Active(ad.ips), uplinks, ad.opts.Excluded)
}
