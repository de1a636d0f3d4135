package config

import (
	"encoding/json"
	"net/netip"
	"strconv"

	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// UplinkRouting is the `uplinkRouting` key: how the flows of external
// IPs on an uplink other than the default route's leave by their own
// uplink (docs/uplinks.md).
type UplinkRouting struct {
	// Off turns it off: replies and egress follow the main table.
	Off bool
	// Route names our mark bits, tables and rule priorities.
	Route slots.Config
	// Gateways names an uplink's gateway of each family where the main
	// table has none for it.
	Gateways map[string][]netip.Addr
}

type uplinkRoutingRaw struct {
	Mode     string              `json:"mode"`
	Mark     string              `json:"mark"`
	Table    *int                `json:"table"`
	Priority *int                `json:"priority"`
	Gateways map[string][]string `json:"gateways"`
}

func (c *Config) setUplinkRouting(raw *netConf) error {
	c.UplinkRouting = UplinkRouting{Route: slots.Default()}
	if len(raw.UplinkRouting) == 0 || string(raw.UplinkRouting) == "null" {
		return nil
	}
	var u uplinkRoutingRaw
	if err := json.Unmarshal(raw.UplinkRouting, &u); err != nil {
		return decodeErrorIn("uplinkRouting", raw.UplinkRouting, err)
	}
	switch u.Mode {
	case "", "auto":
	case "off":
		c.UplinkRouting.Off = true
	default:
		return invalidf("uplinkRouting.mode: %q is not one of auto, off", u.Mode)
	}
	if err := c.UplinkRouting.setRoute(u); err != nil {
		return err
	}
	return c.UplinkRouting.setGateways(u.Gateways)
}

func (r *UplinkRouting) setRoute(u uplinkRoutingRaw) error {
	if u.Mark != "" {
		m, err := strconv.ParseUint(u.Mark, 0, 32)
		if err != nil {
			return invalidf("uplinkRouting.mark: %q is not a 32-bit number", u.Mark)
		}
		r.Route.Mask = uint32(m)
	}
	if u.Table != nil {
		r.Route.Table = *u.Table
	}
	if u.Priority != nil {
		r.Route.Priority = *u.Priority
	}
	if err := r.Route.Validate(); err != nil {
		return invalidf("uplinkRouting.%v", err)
	}
	return nil
}

func (r *UplinkRouting) setGateways(gws map[string][]string) error {
	r.Gateways = map[string][]netip.Addr{}
	for up, list := range gws {
		if err := CheckIfName("uplinkRouting.gateways", up); err != nil {
			return err
		}
		var v4, v6 bool
		for _, s := range list {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" || !a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() || a.Is4In6() {
				return invalidf("uplinkRouting.gateways[%s]: %q is not a unicast IP address", up, s)
			}
			if (a.Is4() && v4) || (a.Is6() && v6) {
				return invalidf("uplinkRouting.gateways[%s]: %q is a second gateway of its family", up, s)
			}
			v4, v6 = v4 || a.Is4(), v6 || a.Is6()
			r.Gateways[up] = append(r.Gateways[up], a)
		}
	}
	return nil
}
