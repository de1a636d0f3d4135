package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"slices"
)

// Attachment names one attachment of a container to a network, as CNI does.
type Attachment struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Key hashes the attachment so that no name from a request, whatever its
// characters, can build a path outside the state directory.
func (a Attachment) Key() string {
	sum := sha256.Sum256([]byte(a.Network + "\x00" + a.ContainerID + "\x00" + a.IfName))
	return hex.EncodeToString(sum[:16])
}

func (a Attachment) String() string {
	return a.Network + "/" + a.ContainerID + "/" + a.IfName
}

// Record is what one attachment holds: the file att/<key>.json.
type Record struct {
	Attachment
	IPs []netip.Addr `json:"ips"`
	// Steering is the attachment's NAT rules, nil when none.
	Steering *Steering `json:"steering,omitempty"`
	// Route is how the attachment asked for its IPs to be held: 0 as
	// addresses, else as routes of that protocol number.
	Route HeldAs `json:"route,omitempty"`
	// Owner is who Owned belong to: the owner of an attachment that took
	// IPs of a node-local pool (package localpool says who that is).
	Owner string `json:"owner,omitempty"`
	// Owned are the IPs of IPs that lie in a pool: they belong to Owner,
	// and no attachment of another owner may hold them while this one does.
	Owned []netip.Addr `json:"owned,omitempty"`
	// Standby says the attachment's network has standby on: an IP another
	// node answers for is held in standby, not refused, and the node's
	// process may move its IPs between active and standby.
	Standby bool `json:"standby,omitempty"`
	// StandbyIPs are the attachment's IPs held in standby: answered by
	// another node, so not on the holder, not announced and not steered
	// here. IPs lists only the IPs held actively.
	StandbyIPs []netip.Addr `json:"standbyIPs,omitempty"`
	// Netns is the container's network namespace as the ADD found it
	// (nil in a record of an older release, or where the ADD could not
	// look at it): for a network that stands by, the node process gives
	// the IP up to a standby node once every container holding it here is
	// gone, without waiting for the runtime's DEL; uninstall releases the
	// IPs of a container gone without its DEL.
	Netns *Netns `json:"netns,omitempty"`
}

// Netns names a network namespace as it was when an ADD ran: its path
// (CNI_NETNS), the device and inode the path led to, and those of the
// directory holding it. The path alone would not do: a bind mount's file
// outlives its namespace, a /proc/PID/ns/net path names another
// process's namespace once the PID is reused, and a node process in a
// container of its own may see another directory at the same path.
type Netns struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	DirDev uint64 `json:"dirDev"`
	DirIno uint64 `json:"dirIno"`
}

// Held is every IP r holds, actively or in standby.
func (r *Record) Held() []netip.Addr {
	out := append([]netip.Addr(nil), r.IPs...)
	for _, ip := range r.StandbyIPs {
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// HoldsExactly says whether r (nil: none) holds ips and no other IP,
// actively or in standby.
func (r *Record) HoldsExactly(ips []netip.Addr) bool {
	if r == nil {
		return false
	}
	a, b := r.Held(), slices.Clone(ips)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, slices.Compact(b))
}

// StandbyOf is each IP's standby holders, as the records say.
func StandbyOf(recs map[string]*Record) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for key, rec := range recs {
		for _, ip := range rec.StandbyIPs {
			out[ip] = append(out[ip], key)
		}
	}
	return out
}

// IPEntry is the index of one IP, the file ip/<addr>.json: who holds it
// and where it is announced. len(Holders) is the IP's reference count.
type IPEntry struct {
	Holders []string `json:"holders"`
	Uplink  string   `json:"uplink,omitempty"`
	// Route is how the IP is held now: 0 as an address, else as a route of
	// that protocol number. The first holder's record decides it.
	Route HeldAs `json:"route,omitempty"`
	// KeepProxy says that the proxy neighbour entry for the IP on Uplink
	// was there before external-ip needed one: another program's, which
	// the release keeps (a proxy entry carries no mark of its owner).
	KeepProxy bool `json:"keepProxy,omitempty"`
	// Standby lists the keys of the attachments that hold the IP in
	// standby: they count for nothing on the holder, and take it over
	// when the node's process finds its active holder gone.
	Standby []string `json:"standby,omitempty"`
}

// Journal is one change under way, the file journal. Applying it is
// idempotent, so it can be carried out again after a crash at any point.
// An ADD's journal is undone by whoever finds it: the ADD did not return
// success, so its runtime takes it as failed. A release is finished.
type Journal struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	// Record is the attachment's new record; nil releases the attachment.
	Record *Record `json:"record"`
	// Touch lists every IP whose holders may change: old and new IPs.
	Touch []netip.Addr `json:"touch"`
	// Uplinks names the uplink chosen for IPs that had no holder yet.
	Uplinks map[netip.Addr]string `json:"uplinks,omitempty"`
	// Old is a re-ADDed attachment's earlier record, which undoing the ADD
	// restores with its IPs' uplinks OldUplinks.
	Old        *Record               `json:"old,omitempty"`
	OldUplinks map[netip.Addr]string `json:"oldUplinks,omitempty"`
	// OldIPs are the index entries of Old's IPs before the ADD, whose
	// uplink and proxy entry's owner undoing it gives back (Journal.Rehome).
	// A journal of an earlier binary has OldUplinks alone; this one still
	// writes them, so that an earlier binary can undo its journal too.
	OldIPs map[netip.Addr]IPEntry `json:"oldIPs,omitempty"`
	// Proxied lists the IPs whose proxy neighbour entry on their uplink
	// was there before this ADD, another program's: kept by the release
	// that undoes the ADD, also when a crash came before the index said so.
	Proxied []netip.Addr `json:"proxied,omitempty"`
	// Steps are changes beyond the record, the index and the addresses,
	// each named by its kind; a kind this binary does not know is refused
	// by name rather than skipped.
	Steps []Step `json:"steps,omitempty"`
	// undoes is the ADD's journal a Reverse undoes, never written.
	undoes *Journal
}

// Step is one further change of a journal, of a named kind.
type Step struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// The ops of a journal.
const (
	OpAdd     = "add"     // undone when found after a crash
	OpRelease = "release" // finished when found after a crash
)

// StepNAT is the one kind of step this binary carries out: the steering
// a change removes or replaces.
const StepNAT = "nat"

// check refuses a journal that this binary cannot carry out. A journal of
// a binary from before "op" says what it is by its record.
func (j *Journal) check(path string) error {
	j.Infer()
	if (j.Op != OpAdd && j.Op != OpRelease) || (j.Op == OpAdd) != (j.Record != nil) {
		return errorf(ErrState, "state file %s is corrupt: op %q with record %v; see the README's recovery section", path, j.Op, j.Record != nil)
	}
	for _, s := range j.Steps {
		if s.Kind != StepNAT {
			return errorf(ErrState, "state file %s has a step of kind %q, which this binary does not know", path, s.Kind)
		}
	}
	return nil
}

// Infer fills in an op that was left out: a change with a record is an ADD.
func (j *Journal) Infer() {
	if j.Op != "" {
		return
	}
	j.Op = OpRelease
	if j.Record != nil {
		j.Op = OpAdd
	}
}

// HeldAs is how an IP is held: as an address on the holder (0), or as a
// host route through it with this routing protocol number, answered on the
// uplink by a proxy neighbour entry.
type HeldAs int

// AsAddress holds an IP as an address on the holder.
const AsAddress HeldAs = 0

// Route says whether the IP is held as a route.
func (h HeldAs) Route() bool { return h != AsAddress }

func (h HeldAs) String() string {
	if h.Route() {
		return "route"
	}
	return "address"
}

// Steering is what a record keeps so that its NAT rules can be made,
// checked and removed without the ADD's prevResult (DEL may have none).
// Traffic is the mode as the config spells it; what each mode steers is
// the assigner's to decide.
type Steering struct {
	Traffic   string         `json:"traffic,omitempty"`
	Container []netip.Prefix `json:"containerAddrs,omitempty"`
	Egress    []EgressRule   `json:"egress,omitempty"`
	Hairpin   []HairpinRule  `json:"hairpin,omitempty"`
	// Excluded are the destinations whose flows from Container are never
	// SNATed (the config's egressExcludedCIDRs, as the ADD had it). A
	// record written before the key existed has none: no exclusion.
	Excluded []netip.Prefix `json:"excluded,omitempty"`
}

// EgressRule is one egress rule: flows from the container address Source
// leaving through Uplink are given the external IP as their source.
type EgressRule struct {
	Source netip.Addr `json:"source"`
	Uplink string     `json:"uplink"`
	IP     netip.Addr `json:"ip"`
}

// HairpinRule is one hairpin rule: flows from Source, the subnet of the
// container address Target, to an external IP that Target holds.
type HairpinRule struct {
	Source netip.Prefix `json:"source"`
	Target netip.Addr   `json:"target"`
}
