package store

import (
	"encoding/json"
	"net/netip"
	"slices"
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
	r := &Journal{Op: OpRelease, Key: j.Key, Touch: j.Touch, Steps: j.natUndone(), Proxied: j.Proxied, undoes: j}
	if j.Old != nil {
		r.Op, r.Record, r.Uplinks = OpAdd, j.Old, j.OldUplinks
	}
	return r
}

// Rehome is ip's index entry e with the uplink j gives it, and whether
// that changed e: a new uplink for an IP that had none or whose uplink
// vanished (the proxy entry there ours, until an ADD run first says
// otherwise); undoing an ADD that released the IP (its index forgotten)
// or re-homed it, the uplink the IP had before and whether the proxy
// entry there is another program's. Where the ADD left ip on its uplink
// and held, e stays as it is: undoing a switch of hold takes the ADD's
// way off with what the ADD knew of the entry. Undoing a re-homing also
// names the uplink where the ADD made a proxy entry of ours ("": none),
// to be taken away: no index names it once the old uplink is back.
func (j *Journal) Rehome(ip netip.Addr, e IPEntry) (IPEntry, bool, string) {
	was := e
	if up := j.Uplinks[ip]; up != "" && e.Uplink != up {
		e.Uplink, e.KeepProxy = up, false
	}
	if old, ok := j.undone(ip); ok && old.Uplink != "" && (len(was.Holders) == 0 || was.Uplink != old.Uplink) {
		e.Uplink, e.KeepProxy = old.Uplink, old.KeepProxy
	}
	return e, e.Uplink != was.Uplink || e.KeepProxy != was.KeepProxy, j.madeProxy(ip, was, e.Uplink)
}

// undone is ip's index entry before the ADD that j undoes, if that ADD's
// journal kept it.
func (j *Journal) undone(ip netip.Addr) (IPEntry, bool) {
	if j.undoes == nil {
		return IPEntry{}, false
	}
	e, ok := j.undoes.OldIPs[ip]
	return e, ok
}

// madeProxy names the uplink where the ADD that j undoes made ip's proxy
// entry (now being ip's index entry), when undoing moves ip off it to
// next: the uplink that ADD chose anew, unless the entry it found there
// was another program's.
func (j *Journal) madeProxy(ip netip.Addr, now IPEntry, next string) string {
	u := j.undoes
	if u == nil || now.Uplink == next || now.KeepProxy || slices.Contains(u.Proxied, ip) {
		return ""
	}
	if up := u.Uplinks[ip]; up == now.Uplink {
		return up
	}
	return ""
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
	return []Step{{Kind: StepNAT, Data: s.appendJSON(nil)}}
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
