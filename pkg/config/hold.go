package config

import (
	"encoding/json"
	"math"
)

// Hold says how the node holds an external IP: as an address on the holder
// device, or as a host route through it that the node answers ARP and
// neighbour solicitations for on the uplink (proxy neighbour entries).
type Hold string

// The values of the `hold` key; Load resolves HoldAuto to one of the others.
const (
	HoldAddress Hold = "address"
	HoldRoute   Hold = "route"
	HoldAuto    Hold = "auto"
)

// DefaultRouteProtocol is the routing protocol number of our routes, by
// which a routing daemon selects them. No common daemon uses it: FRR's
// zebra takes 186 to 198 as its own (and does not redistribute them as
// kernel routes), iproute2's rt_protos names none above 99 but those, and
// BIRD, Quagga, keepalived, babel and dhcp have numbers below 100.
const DefaultRouteProtocol = 200

// setHold reads `hold` and `routeProtocol`; it runs after setTraffic,
// since `auto` holds as a route exactly when ingress is steered: with
// `none` or `egress` the node itself must answer the IP, which it only
// does for an address.
func (c *Config) setHold(raw *netConf) error {
	c.Hold, c.RouteProtocol = HoldAuto, DefaultRouteProtocol
	if len(raw.Hold) > 0 && string(raw.Hold) != "null" {
		var s string
		if err := json.Unmarshal(raw.Hold, &s); err != nil {
			return decodef("hold: want a string, got %s", truncate(raw.Hold, 64))
		}
		switch h := Hold(s); h {
		case HoldAddress, HoldRoute, HoldAuto:
			c.Hold = h
		default:
			return invalidf("hold: %q is not one of auto, address, route", s)
		}
	}
	if c.Hold == HoldAuto {
		c.Hold = HoldAddress
		if c.Traffic.Ingress() {
			c.Hold = HoldRoute
		}
	}
	if len(raw.RouteProtocol) == 0 || string(raw.RouteProtocol) == "null" {
		return nil
	}
	var n float64
	if err := json.Unmarshal(raw.RouteProtocol, &n); err != nil {
		return decodef("routeProtocol: want a number, got %s", truncate(raw.RouteProtocol, 64))
	}
	if n != math.Trunc(n) || n < 1 || n > 255 {
		return invalidf("routeProtocol: %v is not an integer in 1..255", n)
	}
	c.RouteProtocol = int(n)
	return nil
}
