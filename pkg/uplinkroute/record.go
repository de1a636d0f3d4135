package uplinkroute

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// The node's rules, tables and chain marks are made with one config; its
// record lives in table inet external-ip (an empty chain, routing-MASK-
// TABLE-PRIORITY), so that it is the node's whatever the dataDir, goes
// with the table, and is read by those who have no network config
// (external-ip status and repair). None recorded is the defaults.

func recordName(c slots.Config) string {
	return fmt.Sprintf("%08x-%d-%d", c.Mask, c.Table, c.Priority)
}

func parseRecord(name string) (slots.Config, bool) {
	var c slots.Config
	n, err := fmt.Sscanf(name, "%08x-%d-%d", &c.Mask, &c.Table, &c.Priority)
	return c, err == nil && n == 3 && recordName(c) == name && c.Validate() == nil
}

// configText names a config as uplinkRouting's keys do.
func configText(c slots.Config) string {
	return fmt.Sprintf("mark %#08x, table %d, priority %d", c.Mask, c.Table, c.Priority)
}

// Recorded is the config the node's uplink routing was made with, as
// table inet external-ip records it; the defaults when none is.
func Recorded(t *steer.HostTable) (slots.Config, error) {
	c, _, err := recorded(t)
	return c, err
}

// recorded is Recorded and the record's name, "" for none.
func recorded(t *steer.HostTable) (slots.Config, string, error) {
	var name string
	err := t.With(func(t *nat.Table) (err error) { name, err = t.RoutingRecord(); return err })
	if err != nil || name == "" {
		return slots.Default(), "", err
	}
	c, ok := parseRecord(name)
	if !ok {
		return slots.Config{}, "", errkind.Errorf(errkind.Refused, "table inet %s: chain routing-%s records no uplinkRouting config; delete it if nothing of ours is routed", nat.TableName, name)
	}
	return c, name, nil
}

// Recorded is the node's recorded config (Recorded).
func (h *HostRouting) Recorded() (slots.Config, error) { return Recorded(h.nat) }

// Adopt makes the node's record h's config, under the node lock. A node
// that records another one (an edited entry) first has that config's
// rules and routes taken away and every marked uplink routed and marked
// anew under h's (move); the record changes last, so that a crash before
// it leaves the old record, and the next call moves again.
func (h *HostRouting) Adopt() error {
	was, name, err := recorded(h.nat)
	if err != nil || was == h.c && name != "" {
		return err
	}
	if was != h.c {
		if err := h.move(was); err != nil {
			return err
		}
	}
	return h.nat.With(func(t *nat.Table) error { return t.RecordRouting(name, recordName(h.c)) })
}

// move takes away the rules and routes of ours that config was made (its
// priorities, tables and mask: Read sees no other config's), then routes
// each marked uplink's families by h's tables, with the gateway its old
// table had (else its configured one), and makes its chains with h's
// mark. Nothing but ours in was's range is touched.
func (h *HostRouting) move(was slots.Config) error {
	old := Open(was)
	defer old.Close()
	st, err := old.Read()
	if err != nil {
		return err
	}
	marked, err := h.Marked() // a table of another mask is made anew first
	if err != nil {
		return err
	}
	var errs []error
	for s := range st.Slots {
		errs = append(errs, old.Remove(s, [2]bool{true, true}, [2]bool{}))
	}
	errs = append(errs, old.Remove(0, [2]bool{}, st.Suppress))
	var chains []nat.UplinkChain
	for name, u := range marked {
		errs = append(errs, h.r.Ensure(u.Slot, name, 0, h.movedGateways(name, u, st.Slots[u.Slot]), true))
		chains = append(chains, chainsOf(name, u)...)
	}
	errs = append(errs, h.nat.With(func(t *nat.Table) error { return t.MarkUplinks(chains) }))
	h.now = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("moving the uplink routing from %s to %s: %w", configText(was), configText(h.c), err)
	}
	return nil
}

// movedGateways are the gateways of u's routed families: its old table's,
// else the configured ones.
func (h *HostRouting) movedGateways(name string, u nat.UplinkSlot, old *Slot) [2]netip.Addr {
	var gw [2]netip.Addr
	for f := range 2 {
		if !u.Routed[f] {
			continue
		}
		if old != nil {
			gw[f] = old.Gateway[f]
		}
		for _, g := range h.gateways[name] {
			if !gw[f].IsValid() && fam(g.Is6()) == f {
				gw[f] = g
			}
		}
	}
	return gw
}

// sameConfig refuses a rewrite of the chains by a routing whose config
// is not the node's recorded one: their marks would not be the ones its
// rules match.
func (h *HostRouting) sameConfig() error {
	rec, err := h.Recorded()
	if err != nil || rec == h.c {
		return err
	}
	return errkind.Errorf(errkind.Refused, "uplinkRouting: the node routes with %s, this call with %s: not rewriting the uplink chains", configText(rec), configText(h.c))
}
