package assigner

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/nat"
)

// HostNAT returns the NAT of the host's nftables and conntrack. The
// netlink connection is opened on first use, so that an invocation that
// steers nothing never opens one.
func HostNAT() NAT { return &hostNAT{} }

type hostNAT struct {
	t *nat.Table
}

func (h *hostNAT) table() (*nat.Table, error) {
	if h.t == nil {
		t, err := nat.Open()
		if err != nil {
			return nil, Errorf(ErrHost, "%w", err)
		}
		h.t = t
	}
	return h.t, nil
}

// kernelErr marks an nftables or conntrack failure as the kernel's (code 100).
func kernelErr(err error) error {
	if err == nil {
		return nil
	}
	return Errorf(ErrHost, "%w", err)
}

func (h *hostNAT) do(f func(*nat.Table) error) error {
	t, err := h.table()
	if err != nil {
		return err
	}
	return kernelErr(f(t))
}

func (h *hostNAT) SetIngress(ip netip.Addr, targets []netip.Addr) error {
	return h.do(func(t *nat.Table) error { return t.SetIngress(ip, targets) })
}

func (h *hostNAT) SetEgress(k nat.EgressKey, ip netip.Addr) error {
	return h.do(func(t *nat.Table) error { return t.SetEgress(k, ip) })
}

func (h *hostNAT) DelEgress(k nat.EgressKey) error {
	return h.do(func(t *nat.Table) error { return t.DelEgress(k) })
}

func (h *hostNAT) SetHairpin(hp nat.Hairpin) error {
	return h.do(func(t *nat.Table) error { return t.SetHairpin(hp) })
}

func (h *hostNAT) DelHairpin(hp nat.Hairpin) error {
	return h.do(func(t *nat.Table) error { return t.DelHairpin(hp) })
}

func (h *hostNAT) Ensure() error { return h.do(func(t *nat.Table) error { return t.Ensure() }) }

// Probe's failure is what STATUS reports (code 50), so it stays unwrapped.
func (h *hostNAT) Probe() error {
	t, err := h.table()
	if err != nil {
		return err
	}
	return t.Probe()
}

func (h *hostNAT) Read() (*nat.State, error) {
	t, err := h.table()
	if err != nil {
		return nil, err
	}
	st, err := t.Read()
	return st, kernelErr(err)
}

func (h *hostNAT) Forget(ip, target netip.Addr) error {
	var err error
	if target.IsValid() {
		_, err = nat.ForgetTarget(ip, target)
	} else {
		_, err = nat.ForgetIP(ip)
	}
	return kernelErr(err)
}
