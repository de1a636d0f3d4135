package assigner

import (
	"encoding/json"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

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
	return &journal{Op: store.OpRelease, Key: key, Touch: rec.IPs, Steps: natStep(rec.Steering)}
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
// first run of an ADD (no undo, no replay, which carry steps) of an IP
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
