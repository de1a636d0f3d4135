package assigner

import (
	"errors"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/host"
)

// place decides, under the lock, each IP's uplink and whether this ADD gives
// it its first holder. An IP that is already held keeps the uplink it was
// first announced on, so its proxy entry is removed from the right place.
func (a *Assigner) place(ips []netip.Addr, routes map[netip.Addr]host.Route) ([]Placed, map[netip.Addr]string, error) {
	placed := make([]Placed, 0, len(ips))
	chosen := map[netip.Addr]string{}
	for _, ip := range ips {
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return nil, nil, err
		}
		up, rechosen, err := a.placeIP(ip, e, routes[ip])
		if err != nil {
			return nil, nil, host.AboutIP(ip, err)
		}
		if rechosen {
			chosen[ip] = up.Name
		}
		placed = append(placed, Placed{Addr: ip, Uplink: up, First: len(e.Holders) == 0})
	}
	return placed, chosen, nil
}

// placeIP is ip's uplink: the one it was first announced on while it is
// held, else (also when that uplink vanished) the one its route names now,
// which the journal then records.
func (a *Assigner) placeIP(ip netip.Addr, e ipEntry, r host.Route) (host.Uplink, bool, error) {
	if len(e.Holders) > 0 && e.Uplink != "" {
		up, err := a.ups.ByName(e.Uplink)
		if !errors.Is(err, host.ErrNoLink) {
			return up, false, err
		}
		a.log.Warn("uplink of a held IP is gone; choosing another", "ip", ip, "uplink", e.Uplink)
	}
	up, err := a.ups.For(ip, r)
	return up, true, err
}
