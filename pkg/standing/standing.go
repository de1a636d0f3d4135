package standing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/store"
)

// Set is the IPs an ADD holds in standby: not on the holder, not steered,
// not announced.
type Set map[netip.Addr]bool

// Of is the set of ips, those the node process's move holds in standby.
func Of(ips []netip.Addr) Set {
	s := Set{}
	for _, ip := range ips {
		s[ip] = true
	}
	return s
}

// Probed says whether a probe's error for ip holds it in standby, and
// adds it then: another host answered for it (the MAC that did) and the
// network stands by (on).
func (s Set) Probed(on bool, ip netip.Addr, err error) (net.HardwareAddr, bool) {
	var who *announce.Answered
	if !on || !errors.Is(err, announce.ErrConflict) || !errors.As(err, &who) {
		return nil, false
	}
	s[ip] = true
	return who.MAC, true
}

// Active is ips without those held in standby, in their order.
func (s Set) Active(ips []netip.Addr) []netip.Addr {
	return slices.DeleteFunc(slices.Clone(ips), func(ip netip.Addr) bool { return s[ip] })
}

// Fill makes rec list ips: the active ones in IPs, those in standby apart
// in StandbyIPs; on is whether the network stands by.
func (s Set) Fill(rec *store.Record, ips []netip.Addr, on bool) {
	rec.IPs, rec.StandbyIPs, rec.Standby = s.Active(ips), nil, on
	for _, ip := range ips {
		if s[ip] {
			rec.StandbyIPs = append(rec.StandbyIPs, ip)
		}
	}
}

// Moves says whether a move of the node process still applies to old,
// the record it read: not once the record was released or changed since.
// A move keeps the record's owner and container: it changes how the IPs
// are held, not whose they are.
func Moves(old, rec *store.Record, ips []netip.Addr) bool {
	if !old.HoldsExactly(ips) {
		return false
	}
	rec.Owner, rec.Owned, rec.Netns = old.Owner, old.Owned, old.Netns
	return true
}

// Roles is, for a change writing rec, which IPs it holds actively and
// which in standby only.
func Roles(rec *store.Record) (hold, standby map[netip.Addr]bool) {
	hold, standby = map[netip.Addr]bool{}, map[netip.Addr]bool{}
	if rec == nil {
		return hold, standby
	}
	for _, ip := range rec.IPs {
		hold[ip] = true
	}
	for _, ip := range rec.StandbyIPs {
		standby[ip] = !hold[ip]
	}
	return hold, standby
}

// Left is what the index entry e of an IP keeps once no attachment here
// holds it actively: its standby holders (waiting), and its uplink and
// how it is held for them; nothing when none waits. Quiet says the IP had
// only standby holders here before (or the change holds it in standby),
// so nothing of it is on the kernel or in the table to take off.
func Left(e store.IPEntry, waiting []string, standby bool) (left store.IPEntry, quiet bool) {
	if len(waiting) > 0 {
		left = store.IPEntry{Uplink: e.Uplink, Standby: waiting, Route: e.Route}
	}
	return left, len(e.Holders) == 0 && (len(e.Standby) > 0 || standby)
}

// Waiting is the index entry, for GC and repair, of an IP that only
// standby holders (waiting, sorted) hold here, on uplink up; and whether
// e already is it.
func Waiting(e store.IPEntry, waiting []string, up string) (store.IPEntry, bool) {
	if len(e.Holders) == 0 && slices.Equal(e.Standby, waiting) && e.Uplink != "" {
		return e, true
	}
	return store.IPEntry{Uplink: up, Standby: waiting, Route: e.Route}, false
}

// Drift names what status finds wrong with ip held in standby by keys
// (sorted): its index entry e not listing them, or the IP on the holder
// device while nobody here holds it actively.
func Drift(ip netip.Addr, e store.IPEntry, keys []string, active, onHolder bool, device string) []string {
	var out []string
	if !slices.Equal(e.Standby, keys) {
		out = append(out, fmt.Sprintf("%s: index lists %d standby holders, records %d", ip, len(e.Standby), len(keys)))
	}
	if !active && onHolder {
		out = append(out, fmt.Sprintf("%s: held in standby only but on %s", ip, device))
	}
	return out
}
