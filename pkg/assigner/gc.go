package assigner

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/store"
)

// GC drops the records of network whose attachments are not in keep, then
// reconciles the holder with the records of every network: held IPs that
// went missing come back, addresses nobody holds go.
func (a *Assigner) GC(network string, keep []Attachment) error {
	a.startCall()
	kept := map[string]bool{}
	for _, att := range keep {
		kept[att.Key()] = true
	}
	return a.Collect(func(key string, r *store.Record) bool { return r.Network == network && !kept[key] })
}

// Collect is GC of the records that stale picks, of any network.
func (a *Assigner) Collect(stale func(key string, r *store.Record) bool) error {
	a.startCall()
	lost, err := lostState(a.st, a.holder)
	if err != nil {
		return err
	}
	err = a.underLock(lost, func() error { return a.collect(stale) })
	// Best effort, for what GC did collect: a failure stays queued, for
	// status and the next GC.
	if err := a.queue.Run(); err != nil {
		a.log.Warn("conntrack clean-up failed; the next GC or repair retries it", "error", errkind.OneLine(err))
	}
	return err
}

// lostState says whether the state directory is gone while the holder of
// this dataDir still carries addresses (host.Holder.CarriesLost).
func lostState(st *store.Store, holder *host.Holder) (bool, error) {
	if st.Exists() {
		return false, nil
	}
	return holder.CarriesLost(st.Dir())
}

// collect releases the records stale picks, each on its own: one it
// cannot release is reported, and the others go all the same. The
// reconcile follows unless a record could not be read (it rebuilds the
// index, holder and table from the records, so it would take away what
// that one holds) or a failed release left its change pending.
func (a *Assigner) collect(stale func(key string, r *store.Record) bool) error {
	recs, unread := a.st.Records()
	errs := []error{unread}
	for key, r := range recs {
		if !stale(key, r) {
			continue
		}
		if err := a.commit(key, r); err != nil {
			errs = append(errs, fmt.Errorf("collecting %s: %w", r.Attachment, err))
			if pending, err := a.st.Has(store.JournalFile); pending || err != nil {
				return errors.Join(append(errs, err)...)
			}
			continue
		}
		a.log.Info("collected", "attachment", r.Attachment.String(), "ips", r.IPs)
		delete(recs, key)
	}
	if unread != nil {
		return errors.Join(append(errs, a.st.SweepTmp())...)
	}
	return errors.Join(append(errs, a.reconcile(recs))...)
}

// agreedHold is how ip is to be held: as its holders' records all ask, or
// as it is held now while they disagree. An IP that lost its index entry
// is held as its first holder's record (by key) asks.
func agreedHold(e ipEntry, holders []string, recs map[string]*record) heldAs {
	first := recs[holders[0]].Route
	for _, k := range holders[1:] {
		if recs[k].Route != first {
			if len(e.Holders) == 0 {
				return first
			}
			return e.Route
		}
	}
	return first
}

func keys[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Repair is GC that drops no record: it finishes an interrupted change,
// rebuilds the index from the records and makes the holder carry exactly
// the held IPs. The operator runs it after moving a corrupt file aside.
// It returns the drift it found under its own lock, which it then fixed:
// what a report read before it saw may have been fixed meanwhile by an
// ADD, a DEL or another repair.
func (a *Assigner) Repair() ([]string, error) {
	a.startCall()
	lost, err := lostState(a.st, a.holder)
	if err != nil {
		return nil, err
	}
	var found []string
	err = a.locked(lost, func() error {
		rep, err := a.reportLocked()
		if err != nil {
			return err
		}
		found = rep.Drift
		if err := a.recover(); err != nil {
			return err
		}
		recs, err := a.st.Records()
		if err != nil {
			return err
		}
		a.log.Info("repairing", "records", len(recs))
		return a.reconcile(recs)
	})
	if err != nil {
		return nil, err
	}
	// Off the lock; the operator sees a failure, which stays queued.
	return found, errkind.OneLine(a.queue.Run())
}
