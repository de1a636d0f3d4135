package store

import (
	"encoding/json"
)

// The journals a change is made of, built from the records alone: the
// release of an attachment, the undoing of an ADD, and the steerings a
// journal names. They depend only on the journal's format, so they live
// with it; the assigner carries them out.

// Releasing is the journal that releases the attachment of rec (key):
// every IP it holds, actively or in standby.
func Releasing(key string, rec *Record) *Journal {
	return &Journal{Op: OpRelease, Key: key, Touch: rec.Held(), Steps: natStep(rec.Steering)}
}

// Reverse is the change that undoes an ADD: the earlier record restored,
// or the attachment released when it had none. It is carried out in place,
// never journaled: the ADD's journal stands for it until it is done.
func (j *Journal) Reverse() *Journal {
	if j.Old == nil {
		return &Journal{Op: OpRelease, Key: j.Key, Touch: j.Touch, Steps: j.natUndone(), Proxied: j.Proxied}
	}
	return &Journal{Op: OpAdd, Key: j.Key, Record: j.Old, Touch: j.Touch, Uplinks: j.OldUplinks, Steps: j.natUndone(), Proxied: j.Proxied}
}

// Steerings lists every steering the change knows of for its attachment:
// the new record's, the earlier record's and those its steps carry.
// Applying keeps the rules of what the record is now and removes the
// others'.
func (j *Journal) Steerings() []*Steering {
	var out []*Steering
	if j.Record != nil && j.Record.Steering != nil {
		out = append(out, j.Record.Steering)
	}
	if j.Old != nil && j.Old.Steering != nil {
		out = append(out, j.Old.Steering)
	}
	for _, s := range j.Steps {
		st := &Steering{}
		if s.Kind == StepNAT && json.Unmarshal(s.Data, st) == nil {
			out = append(out, st)
		}
	}
	return out
}

// natStep is the journal step that carries the steering a change removes
// or replaces (StepNAT): a release's record is gone once the change is
// applied, yet a replay must still know which rules to take out.
func natStep(s *Steering) []Step {
	if s == nil {
		return nil
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil // a steering of addresses and names always marshals
	}
	return []Step{{Kind: StepNAT, Data: data}}
}

// natUndone carries, into the change that undoes j, the steering j was
// putting in place, so that undoing removes it.
func (j *Journal) natUndone() []Step {
	steps := append([]Step(nil), j.Steps...)
	if j.Record != nil {
		steps = append(steps, natStep(j.Record.Steering)...)
	}
	return steps
}
