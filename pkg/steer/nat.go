package steer

import (
	"errors"
	"net/netip"
	"os"

	"github.com/external-ip/external-ip/pkg/conntrack"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/linger"
	"github.com/external-ip/external-ip/pkg/nat"
)

// NAT is what the steering asks of the host's nftables table (package
// nat); HostTable is the host's, the tests give a fake.
type NAT interface {
	// Apply makes one attachment's change in one transaction.
	Apply(ch nat.Change) error
	SetIngress(ip netip.Addr, targets []netip.Addr) error
	SetEgress(k nat.EgressKey, ip netip.Addr) error
	DelEgress(k nat.EgressKey) error
	// EgressIP is the IP k's egress rule leaves from, if it has one.
	EgressIP(k nat.EgressKey) (netip.Addr, bool, error)
	SetHairpin(subnet netip.Prefix) error
	DelHairpin(subnet netip.Prefix) error
	Read() (*nat.State, error)
	Ensure() error
	Probe() error
}

var _ NAT = (*HostTable)(nil)

// HostNAT returns the NAT of the host's nftables and conntrack. The
// netlink connection is opened on first use, so that an invocation that
// steers nothing never opens one.
func HostNAT() *HostTable { return &HostTable{} }

// HostTable is the NAT of the host: table inet external-ip and conntrack.
type HostTable struct {
	t  *nat.Table
	ct *conntrack.Conn
	// mask is the uplink marking's bits the table's base rules keep (0:
	// nat's default, uplinkroute's), set by SetUplinkMask.
	mask uint32
}

// Linger gives k copies of the netlink sockets this invocation opened,
// then closes ours. Both are netfilter sockets, whose release waits for
// the namespace's destroy worker if anyone's commit left it pending (the
// DEL just before an ADD), whatever this invocation committed.
func (h *HostTable) Linger(k *linger.Keeper) error {
	var errs []error
	keep := func(f *os.File, err error) {
		k.Keep(f, linger.Netfilter)
		errs = append(errs, err)
	}
	if h.t != nil {
		keep(h.t.File())
	}
	if h.ct != nil {
		keep(h.ct.File())
	}
	return errors.Join(append(errs, h.Close())...)
}

// Close closes the sockets that were opened.
func (h *HostTable) Close() error {
	var errs []error
	if h.t != nil {
		errs = append(errs, h.t.Close())
	}
	if h.ct != nil {
		errs = append(errs, h.ct.Close())
	}
	h.t, h.ct = nil, nil
	return errors.Join(errs...)
}

// SetUplinkMask makes the table's base rules keep mask's bits, the uplink
// routing's (package uplinkroute's NewHostRouting sets it).
// A table already open (read for the routing's record) takes it too.
func (h *HostTable) SetUplinkMask(mask uint32) {
	h.mask = mask
	if h.t != nil {
		h.t.UplinkMask = mask
	}
}

func (h *HostTable) table() (*nat.Table, error) {
	if h.t == nil {
		t, err := nat.Open()
		if err != nil {
			return nil, errkind.Errorf(ErrHost, "%w", err)
		}
		t.UplinkMask = h.mask
		h.t = t
	}
	return h.t, nil
}

// ErrHost: the kernel refused a change (plugin code 100); the kind every
// floor shares.
var ErrHost = errkind.Host

// KernelErr marks an nftables or conntrack failure as the kernel's (code 100).
func KernelErr(err error) error {
	if err == nil {
		return nil
	}
	return errkind.Errorf(ErrHost, "%w", err)
}

// With runs f on the table, opened on first use, and marks its failure as
// the kernel's: for the uplink routing, whose marks share the table's
// netlink connection.
func (h *HostTable) With(f func(*nat.Table) error) error {
	t, err := h.table()
	if err != nil {
		return err
	}
	return KernelErr(f(t))
}

func (h *HostTable) SetIngress(ip netip.Addr, targets []netip.Addr) error {
	return h.With(func(t *nat.Table) error { return t.SetIngress(ip, targets) })
}

func (h *HostTable) SetEgress(k nat.EgressKey, ip netip.Addr) error {
	return h.With(func(t *nat.Table) error { return t.SetEgress(k, ip) })
}

func (h *HostTable) DelEgress(k nat.EgressKey) error {
	return h.With(func(t *nat.Table) error { return t.DelEgress(k) })
}

func (h *HostTable) EgressIP(k nat.EgressKey) (ip netip.Addr, ok bool, err error) {
	err = h.With(func(t *nat.Table) error { ip, ok, err = t.EgressIP(k); return err })
	return ip, ok, err
}

func (h *HostTable) SetHairpin(subnet netip.Prefix) error {
	return h.With(func(t *nat.Table) error { return t.SetHairpin(subnet) })
}

func (h *HostTable) DelHairpin(subnet netip.Prefix) error {
	return h.With(func(t *nat.Table) error { return t.DelHairpin(subnet) })
}

func (h *HostTable) Ensure() error { return h.With(func(t *nat.Table) error { return t.Ensure() }) }

// Probe's failure is what STATUS reports (code 50), so it stays unwrapped.
func (h *HostTable) Probe() error {
	t, err := h.table()
	if err != nil {
		return err
	}
	return t.Probe()
}

func (h *HostTable) Read() (*nat.State, error) {
	t, err := h.table()
	if err != nil {
		return nil, err
	}
	st, err := t.Read()
	return st, KernelErr(err)
}

// Tracked reads the kernel's count of conntrack entries; without the
// conntrack module there is none.
func (h *HostTable) Tracked() (bool, error) { return conntrack.Tracked() }

func (h *HostTable) Seen(addr netip.Addr) (bool, error) {
	var seen bool
	err := h.With(func(t *nat.Table) (err error) { seen, err = t.Seen(addr); return err })
	return seen, err
}

func (h *HostTable) Unsee(addrs []netip.Addr) error {
	return h.With(func(t *nat.Table) error { return t.Unsee(addrs) })
}

// StartPass opens the conntrack socket for the pass; one that cannot be
// opened is left to Forget, which reports it.
func (h *HostTable) StartPass() {
	if h.ct == nil {
		ct, err := conntrack.Open()
		if err != nil {
			return
		}
		h.ct = ct
	}
	h.ct.StartPass()
}

func (h *HostTable) Forget(ip, target netip.Addr) error {
	if err := conntrackFault(); err != nil {
		return KernelErr(err)
	}
	if h.ct == nil {
		ct, err := conntrack.Open()
		if err != nil {
			return KernelErr(err)
		}
		h.ct = ct
	}
	var err error
	if target.IsValid() {
		_, err = h.ct.ForgetTarget(ip, target)
	} else {
		_, err = h.ct.ForgetIP(ip)
	}
	return KernelErr(err)
}

func (h *HostTable) Apply(ch nat.Change) error {
	return h.With(func(t *nat.Table) error { return t.Apply(ch) })
}
