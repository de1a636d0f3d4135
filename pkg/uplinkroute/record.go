package uplinkroute

import (
	"fmt"

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

// Adopt makes the node's record h's config, under the node lock: a node
// that records none records it.
func (h *HostRouting) Adopt() error {
	_, name, err := recorded(h.nat)
	if err != nil || name != "" {
		return err
	}
	return h.nat.With(func(t *nat.Table) error { return t.RecordRouting(name, recordName(h.c)) })
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
