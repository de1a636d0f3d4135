package assigner

import (
	"net/netip"
	"slices"
)

// WhileHeld runs f, under the state lock, with those of ips whose index
// still names att as a holder, and does not run it when none is: the
// detached announcer's check before each round. Under the lock, a DEL, GC or
// repair that released an IP has either finished (the round is not sent) or
// waits for the round; so once a release returns, no later round announces
// what it released. With a change pending (a journal) the holders are not
// known: the round is not sent, with an error, and the announcer never
// replays another invocation's change.
func (a *Assigner) WhileHeld(att Attachment, ips []netip.Addr, f func(held []netip.Addr) error) error {
	l, err := a.st.lockState(false, a.opts.LockTimeout)
	if err != nil || l == nil {
		return err // no state directory: nothing is held
	}
	defer l.unlock()
	if fileExists(a.st.journalPath()) {
		return Errorf(ErrState, "%s: a change is pending; not announcing until it is finished", a.st.journalPath())
	}
	key := att.key()
	var held []netip.Addr
	for _, ip := range ips {
		e, err := a.st.readIP(ip)
		if err != nil {
			return err
		}
		if slices.Contains(e.Holders, key) {
			held = append(held, ip)
		}
	}
	if len(held) == 0 {
		return nil
	}
	return f(held)
}
