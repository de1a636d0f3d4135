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
// keep accepts (store.WhileIndexed).
func (a *Assigner) whileIndexed(ips []netip.Addr, keep func(ipEntry) bool, f func(held []netip.Addr) error) error {
	return store.QuestionsOf(a.st).WhileIndexed(a.opts.LockTimeout, ips, keep, f)
}
