package store

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Questions asks a Store what its readers (the announcers, CHECK,
// uninstall) want to know, under its lock where they need it; a type of
// its own keeps Store's methods to its files and their lock.
type Questions struct{ s *Store }

// QuestionsOf is s's Questions.
func QuestionsOf(s *Store) Questions { return Questions{s} }

// WhileIndexed runs f, under the lock taken to read (nothing made), with
// those of ips whose index entry keep accepts, and not at all when none
// is: the announcers' check before each round. With a change pending (a
// journal) the holders are not known: it fails, and never replays another
// invocation's change. No state directory holds nothing.
func (r Questions) WhileIndexed(timeout time.Duration, ips []netip.Addr, keep func(IPEntry) bool, f func(held []netip.Addr) error) error {
	s := r.s
	l, err := s.Lock(ReadOnly, timeout)
	if err != nil || l == nil {
		return err
	}
	defer l.Unlock()
	if pending, err := s.Has(JournalFile); err != nil || pending {
		if err == nil {
			err = errorf(ErrState, "%s: a change is pending; not announcing until it is finished", s.Path(JournalFile))
		}
		return err
	}
	var held []netip.Addr
	for _, ip := range ips {
		e, err := s.ReadIP(ip)
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

// StillHeld says why the state keeps device, the holder: a pending
// change, or attachments that hold IPs; "" when nothing does.
func (r Questions) StillHeld(device string) (string, error) {
	s := r.s
	pending, err := s.Has(JournalFile)
	if err != nil {
		return "", err
	}
	if pending {
		return fmt.Sprintf("holder %s: kept: an interrupted change is pending in %s; run external-ip repair, then uninstall again", device, s.Path(JournalFile)), nil
	}
	recs, err := s.Records()
	if err != nil || len(recs) == 0 {
		return "", err
	}
	return fmt.Sprintf("holder %s and table inet external-ip: kept: %d attachments still hold external IPs (state in %s); run uninstall again once their pods are gone",
		device, len(recs), s.Dir()), nil
}

// NotStandingBy is the first of ips whose index does not list key as a
// standby holder; the zero Addr when each does.
func (r Questions) NotStandingBy(key string, ips []netip.Addr) (netip.Addr, error) {
	s := r.s
	for _, ip := range ips {
		e, err := s.ReadIP(ip)
		if err != nil || !slices.Contains(e.Standby, key) {
			return ip, err
		}
	}
	return netip.Addr{}, nil
}
