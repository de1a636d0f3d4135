package store

import (
	"encoding/json"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/plainjson"
)

// The record and the index entries that every DEL and ADD read decode by
// hand when they are in the form this package writes them: encoding/json
// builds each struct type's field table by reflection on its first use in
// a process, and for a record that took 0.155 ms of the 0.21 ms its read
// cost a DEL (profile of 300 steered IPv4 DELs at an exec floor of 1.5
// ms). End to end, with a journal's steps encoded by hand (stateenc.go):
// -0.20 ms CPU per steered DEL, 95% CI -0.25 to -0.14, at an exec floor
// of 1.60 ms. Neither showed alone (CPU -0.03 ms, CI -0.08 to +0.02, and
// -0.03 ms, -0.09 to +0.05): each left encoding/json building the tables
// of the same types for the other.
//
// The hand path (package plainjson) gives up on anything but the plain
// form (a key in another case, a duplicate, an escape, a number where a
// string goes), and encoding/json then decodes the document as ever, with
// its result or its error. On the documents it takes it agrees with
// encoding/json: FuzzStateDecodingIsEncodingJSONs compares the two over
// arbitrary input, and TestStateDecodersReadEveryField fills every field
// by reflection, so that a field added without its decoder fails.

// decodeState is json.Unmarshal(b, v) for a new v, by hand where v knows
// how.
func decodeState(b []byte, v any) error {
	if h, ok := v.(handDecoded); ok && h.decodeHand(b) {
		return nil
	}
	return json.Unmarshal(b, v)
}

// handDecoded is a state value that decodes itself; it must be zero.
type handDecoded interface {
	decodeHand(b []byte) bool
}

// decodeHand fills the zero *r from b and says so, or leaves it as it is.
func (r *Record) decodeHand(b []byte) bool {
	var n Record
	if !decodeWith(b, n.decode) {
		return false
	}
	*r = n
	return true
}

func (e *IPEntry) decodeHand(b []byte) bool {
	var n IPEntry
	if !decodeWith(b, n.decode) {
		return false
	}
	*e = n
	return true
}

// decodeWith runs f over b and says whether the hand path took it all.
func decodeWith(b []byte, f func(*plainjson.Decoder)) bool {
	d := plainjson.New(b)
	f(d)
	return d.OK()
}

// The JSON names of each hand-decoded type's fields: a name left out
// would be passed over, which TestStateDecodersReadEveryField finds.
var (
	recordNames   = []string{"network", "containerID", "ifName", "ips", "steering", "route", "owner", "owned", "standby", "standbyIPs", "netns"}
	netnsNames    = []string{"path", "dev", "ino", "dirDev", "dirIno"}
	steeringNames = []string{"traffic", "containerAddrs", "egress", "hairpin", "excluded"}
	egressNames   = []string{"source", "uplink", "ip"}
	hairpinNames  = []string{"source", "target"}
	ipEntryNames  = []string{"holders", "uplink", "route", "keepProxy", "standby"}
)

func (r *Record) decode(d *plainjson.Decoder) {
	d.Object(recordNames, func(name string) {
		switch name {
		case "network":
			d.Str(&r.Network)
		case "containerID":
			d.Str(&r.ContainerID)
		case "ifName":
			d.Str(&r.IfName)
		case "ips":
			plainjson.List(d, &r.IPs, addr(d))
		case "steering":
			plainjson.Ptr(d, &r.Steering, func(s *Steering) { s.decode(d) })
		case "route":
			d.Int((*int)(&r.Route))
		case "owner":
			d.Str(&r.Owner)
		case "owned":
			plainjson.List(d, &r.Owned, addr(d))
		case "standby":
			d.Bool(&r.Standby)
		case "standbyIPs":
			plainjson.List(d, &r.StandbyIPs, addr(d))
		case "netns":
			plainjson.Ptr(d, &r.Netns, func(n *Netns) { n.decode(d) })
		}
	})
}

func (n *Netns) decode(d *plainjson.Decoder) {
	d.Object(netnsNames, func(name string) {
		switch name {
		case "path":
			d.Str(&n.Path)
		case "dev":
			d.Uint64(&n.Dev)
		case "ino":
			d.Uint64(&n.Ino)
		case "dirDev":
			d.Uint64(&n.DirDev)
		case "dirIno":
			d.Uint64(&n.DirIno)
		}
	})
}

func (s *Steering) decode(d *plainjson.Decoder) {
	d.Object(steeringNames, func(name string) {
		switch name {
		case "traffic":
			d.Str(&s.Traffic)
		case "containerAddrs":
			plainjson.List(d, &s.Container, prefix(d))
		case "egress":
			plainjson.List(d, &s.Egress, func(r *EgressRule) { r.decode(d) })
		case "hairpin":
			plainjson.List(d, &s.Hairpin, func(r *HairpinRule) { r.decode(d) })
		case "excluded":
			plainjson.List(d, &s.Excluded, prefix(d))
		}
	})
}

func (r *EgressRule) decode(d *plainjson.Decoder) {
	d.Object(egressNames, func(name string) {
		switch name {
		case "source":
			plainjson.Text(d, &r.Source)
		case "uplink":
			d.Str(&r.Uplink)
		case "ip":
			plainjson.Text(d, &r.IP)
		}
	})
}

func (r *HairpinRule) decode(d *plainjson.Decoder) {
	d.Object(hairpinNames, func(name string) {
		switch name {
		case "source":
			plainjson.Text(d, &r.Source)
		case "target":
			plainjson.Text(d, &r.Target)
		}
	})
}

func (e *IPEntry) decode(d *plainjson.Decoder) {
	d.Object(ipEntryNames, func(name string) {
		switch name {
		case "holders":
			plainjson.List(d, &e.Holders, d.Str)
		case "uplink":
			d.Str(&e.Uplink)
		case "route":
			d.Int((*int)(&e.Route))
		case "keepProxy":
			d.Bool(&e.KeepProxy)
		case "standby":
			plainjson.List(d, &e.Standby, d.Str)
		}
	})
}

func addr(d *plainjson.Decoder) func(*netip.Addr) {
	return func(a *netip.Addr) { plainjson.Text(d, a) }
}

func prefix(d *plainjson.Decoder) func(*netip.Prefix) {
	return func(p *netip.Prefix) { plainjson.Text(d, p) }
}
