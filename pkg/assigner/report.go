package assigner

import (
	"fmt"
	"net/netip"
	"slices"
)

// reportIPs fills rep with each held IP and every disagreement between the
// records, the index and the holder device.
func (a *Assigner) reportIPs(rep *Report, recs map[string]*record, dev int) error {
	want := map[netip.Addr][]string{}
	for key, r := range recs {
		for _, ip := range r.IPs {
			want[ip] = append(want[ip], key)
		}
	}
	onDevice := map[netip.Addr]bool{}
	if dev != 0 {
		addrs, err := a.k.holderAddrs(dev)
		if err != nil {
			return err
		}
		for _, ip := range addrs {
			onDevice[ip] = true
		}
	}
	ips := keys(want)
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		ir, err := a.reportIP(rep, ip, want[ip], recs, onDevice[ip])
		if err != nil {
			return err
		}
		rep.IPs = append(rep.IPs, ir)
	}
	return a.reportStray(rep, want, onDevice)
}

func (a *Assigner) reportIP(rep *Report, ip netip.Addr, keys []string, recs map[string]*record, on bool) (IPReport, error) {
	e, err := a.st.readIP(ip)
	if err != nil {
		return IPReport{}, err
	}
	slices.Sort(keys)
	ir := IPReport{Addr: ip, Uplink: e.Uplink, OnDevice: on}
	for _, k := range keys {
		ir.Holders = append(ir.Holders, recs[k].Attachment)
	}
	if !slices.Equal(e.Holders, keys) {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: index lists %d holders, records %d", ip, len(e.Holders), len(keys)))
	}
	if !on {
		rep.Drift = append(rep.Drift, fmt.Sprintf("%s: held but not on %s", ip, a.opts.Device))
	}
	if ip.Is6() && e.Uplink != "" {
		ok, err := a.k.hasProxy(e.Uplink, ip)
		ir.Proxy = &ok
		if err == nil && !ok {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: no proxy neighbour entry on %s", ip, e.Uplink))
		}
	}
	return ir, nil
}

// reportStray names what is on the holder or in the index with no record.
func (a *Assigner) reportStray(rep *Report, want map[netip.Addr][]string, onDevice map[netip.Addr]bool) error {
	for ip := range onDevice {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: on %s but held by no record", ip, a.opts.Device))
		}
	}
	indexed, err := a.st.indexed()
	if err != nil {
		return err
	}
	for _, ip := range indexed {
		if _, held := want[ip]; !held {
			rep.Drift = append(rep.Drift, fmt.Sprintf("%s: indexed but held by no record", ip))
		}
	}
	slices.Sort(rep.Drift)
	return nil
}
