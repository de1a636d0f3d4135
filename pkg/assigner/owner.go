package assigner

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/store"
)

// Owner decides whom an ADD's IPs belong to (package localpool, for the
// IPs of node-local pools). The assigner asks it under the lock, after
// any interrupted change is settled and before anything changes, and
// keeps its answer in the record that the ADD's journal writes: the check
// and the hold are one journaled change, so a crash between them can
// neither lose an IP given from a pool nor give it twice.
type Owner interface {
	// Check refuses the ADD of the attachment with key when the state
	// says that another owner holds one of ips, or (an IP given from a
	// pool) that anyone else holds it.
	Check(st StateReader, key string, ips []netip.Addr) error
	// Owns is what the record keeps: the owner, and which of ips are its.
	Owns(ips []netip.Addr) (owner string, owned []netip.Addr)
}

// StateReader is what an Owner reads of the state, under the lock.
type StateReader = store.Reader

// ReadState runs f on the state under the lock, once any change a crash
// cut short is settled (so that an ADD rolled back gives its IPs back
// before they are read as held): what a pool request reads to choose free
// IPs before its ADD, which checks them again under its own lock. No
// state directory is an empty state, and nothing is made.
func (a *Assigner) ReadState(f func(StateReader) error) error {
	a.startCall()
	ran := false
	err := a.withState(func() error { ran = true; return f(a.st) })
	if err != nil || ran {
		return err
	}
	return f(store.Empty{})
}

// checkOwner asks the Owner, if any, whether the ADD may hold its IPs.
func (ad *adding) checkOwner() error {
	if ad.opts.Owner == nil {
		return nil
	}
	return ad.opts.Owner.Check(ad.st, ad.att.Key(), ad.ips)
}

// owns is what the ADD's record keeps of its IPs' owner.
func (ad *adding) owns() (string, []netip.Addr) {
	if ad.opts.Owner == nil {
		return "", nil
	}
	return ad.opts.Owner.Owns(ad.ips)
}
