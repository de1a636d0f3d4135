package localpool

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/store"
)

// OwnerOf is whom an attachment's pool IPs belong to: the pod's namespace
// when the runtime names one (K8S_POD_NAMESPACE), else the network, so that
// the containers of one podman network share an owner and those of
// another network do not.
func OwnerOf(network, namespace string) string {
	if namespace != "" {
		return "namespace " + namespace
	}
	return "network " + network
}

// Rules are the pools' rules for one ADD; they implement assigner.Owner.
type Rules struct {
	// Owner is the attachment's owner (OwnerOf).
	Owner string
	// InPool names the pool that covers an IP, "" when none does.
	InPool func(netip.Addr) string
	// Given are the IPs the ADD was given from a pool: no other attachment
	// may hold them, of its owner or another.
	Given []netip.Addr
}

// Check refuses the ADD of the attachment with key when an IP it was given
// is held by another attachment (ErrTaken: chosen free, taken before this
// lock), or when an IP it names is another owner's (ErrOwned, naming the
// owner). An IP held by others that no pool covers and no holder owns is
// shared as it always was. Every holder of an owned IP has its owner, so
// the first other holder's record answers for all.
func (r *Rules) Check(st store.Reader, key string, ips []netip.Addr) error {
	for _, ip := range ips {
		e, err := st.ReadIP(ip)
		if err != nil {
			return err
		}
		// A holder in standby owns the IP as much as an active one: it
		// takes the IP over when the node holding it actively goes.
		others := slices.DeleteFunc(append(e.Holders, e.Standby...), func(h string) bool { return h == key })
		if len(others) == 0 {
			continue
		}
		if slices.Contains(r.Given, ip) {
			return errorf(ErrTaken, "%s: given from pool %s but taken by another attachment meanwhile", ip, r.inPool(ip))
		}
		if err := r.mayShare(st, ip, others[0]); err != nil {
			return err
		}
	}
	return nil
}

// mayShare says whether the attachment may join holder in holding ip.
func (r *Rules) mayShare(st store.Reader, ip netip.Addr, holder string) error {
	rec, err := st.ReadRecord(holder)
	if err != nil {
		return err
	}
	owner, owned := "", false
	if rec != nil {
		owner, owned = rec.Owner, slices.Contains(rec.Owned, ip)
	}
	switch {
	case owned && owner != r.Owner:
		return errorf(ErrOwned, "%s: is owned by %s; an attachment of %s may not hold it", ip, owner, r.Owner)
	case !owned && r.inPool(ip) != "":
		return errorf(ErrOwned, "%s: lies in pool %s but is held by an attachment that owns no pool IP (held before the pool, or by a network without it); release it first", ip, r.inPool(ip))
	}
	return nil
}

// Owns is what the attachment's record keeps: its owner and the IPs that
// lie in a pool, or nothing when none does.
func (r *Rules) Owns(ips []netip.Addr) (string, []netip.Addr) {
	var owned []netip.Addr
	for _, ip := range ips {
		if r.inPool(ip) != "" {
			owned = append(owned, ip)
		}
	}
	if len(owned) == 0 {
		return "", nil
	}
	return r.Owner, owned
}

func (r *Rules) inPool(ip netip.Addr) string {
	if r.InPool == nil {
		return ""
	}
	return r.InPool(ip)
}
