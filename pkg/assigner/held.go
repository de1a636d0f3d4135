package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/store"
)

// WhileHeld runs f, under the state lock, with those of ips whose index
// still names att as a holder, and does not run it when none is: the
// detached announcer's check before each round. Under the lock, a DEL, GC or
// repair that released an IP has either finished (the round is not sent) or
// waits for the round; so once a release returns, no later round announces
// what it released. With a change pending (a journal) the holders are not
// known: the round is not sent, with an error, and the announcer never
// replays another invocation's change. It changes nothing: a state
// directory with a part missing holds nothing.
func (a *Assigner) WhileHeld(att Attachment, ips []netip.Addr, f func(held []netip.Addr) error) error {
	a.startCall()
	key := att.Key()
	return a.whileIndexed(ips, func(e ipEntry) bool { return slices.Contains(e.Holders, key) }, f)
}

// WhileHeldOn is WhileHeld for the node's upkeep, which re-announces an IP
// for all its holders: it runs f with those of ips that any attachment
// still holds on uplink, so that an IP whose first holder left keeps its
// rounds while another holds it, and one moved to another uplink is not
// announced on this one.
func (a *Assigner) WhileHeldOn(uplink string, ips []netip.Addr, f func(held []netip.Addr) error) error {
	a.startCall()
	return a.whileIndexed(ips, func(e ipEntry) bool { return len(e.Holders) > 0 && e.Uplink == uplink }, f)
}

// Holds reports whether any attachment on this node holds ip, read under
// the lock and changing nothing: what a refusal of ip says about this node.
// No state directory holds nothing; with a change pending (a journal) the
// holders are not known, an error.
func (a *Assigner) Holds(ip netip.Addr) (bool, error) {
	a.startCall()
	held := false
	err := a.whileIndexed([]netip.Addr{ip}, func(e ipEntry) bool { return len(e.Holders) > 0 }, func([]netip.Addr) error {
		held = true
		return nil
	})
	return held, err
}

// whileIndexed runs f under the lock with those of ips whose index entry
// keep accepts, and not at all when none is.
func (a *Assigner) whileIndexed(ips []netip.Addr, keep func(ipEntry) bool, f func(held []netip.Addr) error) error {
	l, err := a.lockToRead()
	if err != nil || l == nil {
		return err // no state directory: nothing is held
	}
	defer l.Unlock()
	if pending, err := a.st.Has(store.JournalFile); err != nil || pending {
		return pendingError(a.st, err)
	}
	var held []netip.Addr
	for _, ip := range ips {
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return err
		}
		if keep(e) {
			held = append(held, ip)
		}
	}
	if len(held) == 0 {
		return nil
	}
	return f(held)
}

// pendingError is why no round is sent: the journal could not be looked
// at, or a change is pending.
func pendingError(st *store.Store, err error) error {
	if err != nil {
		return err
	}
	return Errorf(ErrState, "%s: a change is pending; not announcing until it is finished", st.Path(store.JournalFile))
}
