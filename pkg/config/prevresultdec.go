package config

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/external-ip/external-ip/pkg/plainjson"
)

// plainResult is create.Create(cniVersion, raw) for a result of the
// library's current types (cniVersion and the result's own 1.0.0 or
// 1.1.0), read by hand when it is in plain form (package plainjson); ok
// is false for any other, which the library then reads. Its decoding
// built encoding/json's tables for five of the library's types in every
// ADD (A/B, end to end, over the config's hand decoding, 200 pairs: -0.06
// ms CPU per steered ADD, 95% CI -0.10 to -0.02, and -0.10 ms, -0.14 to
// -0.05, beside an IP held on a second uplink, at an exec floor of 1.60
// ms). FuzzPrevResultDecodingIsTheLibrarys compares the two, and
// TestPrevResultDecoderReadsEveryField fills every field of the
// library's types by reflection, so that a field a later release of the
// library adds fails the test rather than being passed over.
func plainResult(cniVersion string, raw []byte) (*current.Result, bool) {
	if !currentVersion(cniVersion) {
		return nil, false
	}
	r := &current.Result{}
	d := plainjson.New(raw)
	d.Object(resultNames, func(name string) { decodeResultField(d, r, name) })
	return r, d.OK() && currentVersion(r.CNIVersion)
}

func currentVersion(v string) bool { return v == "1.0.0" || v == "1.1.0" }

// The JSON names of the library's result types' fields.
var (
	resultNames    = []string{"cniVersion", "interfaces", "ips", "routes", "dns"}
	interfaceNames = []string{"name", "mac", "mtu", "sandbox", "socketPath", "pciID"}
	ipConfigNames  = []string{"interface", "address", "gateway"}
	routeNames     = []string{"dst", "gw", "mtu", "advmss", "priority", "table", "scope"}
	dnsNames       = []string{"nameservers", "domain", "search", "options"}
)

func decodeResultField(d *plainjson.Decoder, r *current.Result, name string) {
	switch name {
	case "cniVersion":
		d.Str(&r.CNIVersion)
	case "interfaces":
		plainjson.List(d, &r.Interfaces, func(p **current.Interface) { plainjson.Ptr(d, p, decodeInterface(d)) })
	case "ips":
		plainjson.List(d, &r.IPs, func(p **current.IPConfig) { plainjson.Ptr(d, p, decodeIPConfig(d)) })
	case "routes":
		plainjson.List(d, &r.Routes, func(p **types.Route) { plainjson.Ptr(d, p, decodeRoute(d)) })
	case "dns":
		decodeDNS(d, &r.DNS)
	}
}

func decodeInterface(d *plainjson.Decoder) func(*current.Interface) {
	return func(i *current.Interface) {
		d.Object(interfaceNames, func(name string) {
			switch name {
			case "name":
				d.Str(&i.Name)
			case "mac":
				d.Str(&i.Mac)
			case "mtu":
				d.Int(&i.Mtu)
			case "sandbox":
				d.Str(&i.Sandbox)
			case "socketPath":
				d.Str(&i.SocketPath)
			case "pciID":
				d.Str(&i.PciID)
			}
		})
	}
}

func decodeIPConfig(d *plainjson.Decoder) func(*current.IPConfig) {
	return func(c *current.IPConfig) {
		d.Object(ipConfigNames, func(name string) {
			switch name {
			case "interface":
				plainjson.Ptr(d, &c.Interface, d.Int)
			case "address":
				decodeCIDR(d, &c.Address)
			case "gateway":
				plainjson.Text(d, &c.Gateway)
			}
		})
	}
}

func decodeRoute(d *plainjson.Decoder) func(*types.Route) {
	return func(r *types.Route) {
		d.Object(routeNames, func(name string) {
			switch name {
			case "dst":
				decodeCIDR(d, &r.Dst)
			case "gw":
				plainjson.Text(d, &r.GW)
			case "mtu":
				d.Int(&r.MTU)
			case "advmss":
				d.Int(&r.AdvMSS)
			case "priority":
				d.Int(&r.Priority)
			case "table":
				plainjson.Ptr(d, &r.Table, d.Int)
			case "scope":
				plainjson.Ptr(d, &r.Scope, d.Int)
			}
		})
	}
}

func decodeDNS(d *plainjson.Decoder, dns *types.DNS) {
	d.Object(dnsNames, func(name string) {
		switch name {
		case "nameservers":
			plainjson.List(d, &dns.Nameservers, d.Str)
		case "domain":
			d.Str(&dns.Domain)
		case "search":
			plainjson.List(d, &dns.Search, d.Str)
		case "options":
			plainjson.List(d, &dns.Options, d.Str)
		}
	})
}

// decodeCIDR reads an address with its prefix length as the library's
// types.IPNet does (types.ParseCIDR); a null, which it refuses, gives up.
func decodeCIDR(d *plainjson.Decoder, n *net.IPNet) {
	var s *string
	d.StrPtr(&s)
	if s == nil {
		d.GiveUp()
		return
	}
	p, err := types.ParseCIDR(*s)
	if err != nil {
		d.GiveUp()
		return
	}
	*n = *p
}
