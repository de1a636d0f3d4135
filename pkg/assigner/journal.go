package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// Del releases att's record and removes every IP nobody holds any more.
// Something already gone is not an error: DEL may come twice.
func (a *Assigner) Del(att Attachment) error {
	a.startCall()
	return a.withState(func() error {
		key := att.Key()
		rec, err := a.st.ReadRecord(key)
		if err != nil || rec == nil {
			return err
		}
		if err := a.commit(key, rec); err != nil {
			return err
		}
		a.log.Info("deleted", "attachment", att.String(), "ips", rec.IPs)
		return nil
	})
}

// commit carries out the release of rec, run for the first time: begun,
// applied, its journal dropped. It says goodbye as rec stands by, as its
// ADD chose: a DEL's config may say otherwise (read leniently).
func (a *Assigner) commit(key string, rec *record) error {
	j := store.Releasing(key, rec)
	if err := a.begin(j); err != nil {
		return err
	}
	c := a.newChange(j, firstRun)
	c.goodbye = rec.Standby
	if err := c.apply(); err != nil {
		return err
	}
	a.step("done")
	return a.st.Remove(store.JournalFile)
}

// begin makes a change durable in the journal before touching anything
// else. It first reads every index entry the change will touch, so that a
// corrupt one fails the change with nothing changed rather than half-way
// through.
func (a *Assigner) begin(j *journal) error {
	j.Infer()
	for _, ip := range j.Touch {
		if _, err := a.st.ReadIP(ip); err != nil {
			return err
		}
	}
	a.step("journal")
	return a.st.Write(store.JournalFile, j)
}

// recover sweeps what a killed write left in tmp/, removes a holder device a
// crash left half made (host.Holder.Recover), and settles a change left in
// the journal, replaying it: an ADD is undone, a release finished.
func (a *Assigner) recover() error {
	if err := a.st.SweepTmp(); err != nil {
		return err
	}
	if err := a.holder.Recover(); err != nil {
		return err
	}
	j, err := a.st.ReadJournal()
	if err != nil || j == nil {
		return err
	}
	if j.Op == store.OpAdd {
		a.log.Warn("rolling back an interrupted ADD", "journal", a.st.Path(store.JournalFile), "key", j.Key)
		j = j.Reverse()
	} else {
		a.log.Warn("finishing an interrupted release", "journal", a.st.Path(store.JournalFile), "key", j.Key)
	}
	if err := a.newChange(j, replaying).apply(); err != nil {
		return err
	}
	return a.st.Remove(store.JournalFile)
}

// freshChains lists the IPs whose chain this change makes, not rewrites: a
// first run of an ADD (not an undo or a replay, which carry steps) of an IP
// whose one holder is this attachment and that its earlier record did not
// steer. nat makes their chain with additions only (nat.Change.Fresh).
func freshChains(j *journal, holders map[netip.Addr][]string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	if j.Op != store.OpAdd || len(j.Steps) > 0 {
		return out
	}
	var before *steering
	if j.Old != nil {
		before = j.Old.Steering
	}
	for ip, hs := range holders {
		_, steered := steer.Target(before, ip)
		out[ip] = slices.Equal(hs, []string{j.Key}) && !steered
	}
	return out
}
