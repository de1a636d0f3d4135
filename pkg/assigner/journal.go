package assigner

import (
	"encoding/json"
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
		if err := a.commit(releasing(key, rec)); err != nil {
			return err
		}
		a.log.Info("deleted", "attachment", att.String(), "ips", rec.IPs)
		return nil
	})
}

// commit carries out a release, run for the first time: begun, applied,
// its journal dropped.
func (a *Assigner) commit(j *journal) error {
	if err := a.begin(j); err != nil {
		return err
	}
	if err := a.newChange(j, firstRun).apply(); err != nil {
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

// reverse is the change that undoes an ADD: the earlier record restored,
// or the attachment released when it had none. It is carried out in place,
// never journaled: the ADD's journal stands for it until it is done.
func reverse(j *journal) *journal {
	if j.Old == nil {
		return &journal{Op: store.OpRelease, Key: j.Key, Touch: j.Touch, Steps: natUndone(j), Proxied: j.Proxied}
	}
	return &journal{Op: store.OpAdd, Key: j.Key, Record: j.Old, Touch: j.Touch, Uplinks: j.OldUplinks, Steps: natUndone(j), Proxied: j.Proxied}
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
		j = reverse(j)
	} else {
		a.log.Warn("finishing an interrupted release", "journal", a.st.Path(store.JournalFile), "key", j.Key)
	}
	if err := a.newChange(j, replaying).apply(); err != nil {
		return err
	}
	return a.st.Remove(store.JournalFile)
}

// natStep is the journal step that carries the steering a change removes
// or replaces (store.StepNAT): a release's record is gone once the change
// is applied, yet a replay must still know which rules to take out.
func natStep(s *steering) []journalStep {
	if s == nil {
		return nil
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil // a steering of addresses and names always marshals
	}
	return []journalStep{{Kind: store.StepNAT, Data: data}}
}

// releasing is the journal that releases the attachment of rec.
func releasing(key string, rec *record) *journal {
	return &journal{Op: store.OpRelease, Key: key, Touch: rec.Held(), Steps: natStep(rec.Steering)}
}

// natWas lists every steering the change knows of for its attachment: the
// new record's, the earlier record's and those its steps carry. Applying
// keeps the rules of what the record is now and removes the others'.
func natWas(j *journal) []*steering {
	var out []*steering
	if j.Record != nil && j.Record.Steering != nil {
		out = append(out, j.Record.Steering)
	}
	if j.Old != nil && j.Old.Steering != nil {
		out = append(out, j.Old.Steering)
	}
	for _, s := range j.Steps {
		st := &steering{}
		if s.Kind == store.StepNAT && json.Unmarshal(s.Data, st) == nil {
			out = append(out, st)
		}
	}
	return out
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

// natUndone carries, into the change that undoes j, the steering j was
// putting in place, so that undoing removes it.
func natUndone(j *journal) []journalStep {
	steps := append([]journalStep(nil), j.Steps...)
	if j.Record != nil {
		steps = append(steps, natStep(j.Record.Steering)...)
	}
	return steps
}
