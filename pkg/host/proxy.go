package host

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/store"
)

// Reachable checks the sysctls without which the kernel would not answer
// the LAN for an IP held the way h says.
func (k *Netlink) Reachable(up Uplink, v6 bool, h store.HeldAs) error {
	switch {
	case v6:
		return needSysctl("ipv6/conf/"+up.Name+"/forwarding", "proxy NDP, which answers the LAN's neighbour solicitations for IPv6 external IPs, needs IPv6 forwarding on the uplink; external-ip does not turn it on")
	case h.Route():
		// arp_process answers for a proxy entry only on an interface that
		// forwards (IN_DEV_FORWARD), and then whatever arp_ignore says.
		return needSysctl("ipv4/conf/"+up.Name+"/forwarding", "proxy ARP, which answers the LAN's ARP requests for external IPs held as routes, needs IPv4 forwarding on the uplink; external-ip does not turn it on")
	}
	for _, dev := range []string{"all", up.Name} {
		key := "ipv4/conf/" + dev + "/arp_ignore"
		v, err := sysctl(key)
		if err != nil {
			return errorf(ErrHost, "reading %s: %w", key, err)
		}
		if v != 0 {
			return errorf(ErrUnreachable, "net.%s is %d: the kernel would not answer ARP for external IPs on the holder device; set it to 0, or hold them as routes (\"hold\": \"route\")", dotted(key), v)
		}
	}
	return nil
}

// needSysctl fails with why when the switch key is off.
func needSysctl(key, why string) error {
	v, err := sysctl(key)
	if err != nil {
		return errorf(ErrHost, "reading %s: %w", key, err)
	}
	if v == 0 {
		return errorf(ErrUnreachable, "net.%s is 0: %s", dotted(key), why)
	}
	return nil
}

func dotted(key string) string { return strings.ReplaceAll(key, "/", ".") }

// enableProxy makes the uplink answer solicitations for proxied addresses
// of ip's family (IPv6 needs proxy_ndp; IPv4's entries need no switch) and
// at once (proxy_delay 0) rather than after a random delay of up to 0.8 s:
// both arp_process and ndisc_recv_ns queue a broadcast solicitation for a
// proxy entry unless the delay is 0.
func enableProxy(uplink string, ip netip.Addr) error {
	type setting struct {
		path string
		want int
	}
	todo := []setting{{"ipv4/neigh/" + uplink + "/proxy_delay", 0}}
	if ip.Is6() {
		todo = []setting{{"ipv6/conf/" + uplink + "/proxy_ndp", 1}, {"ipv6/neigh/" + uplink + "/proxy_delay", 0}}
	}
	for _, s := range todo {
		if v, err := sysctl(s.path); err == nil && v == s.want {
			continue
		}
		if err := os.WriteFile("/proc/sys/net/"+s.path, []byte(strconv.Itoa(s.want)), 0o644); err != nil {
			return errorf(ErrHost, "setting net.%s to %d: %w", dotted(s.path), s.want, err)
		}
	}
	return nil
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func (k *Netlink) proxyNeigh(uplink string, ip netip.Addr) (*netlink.Neigh, error) {
	index, ok := k.index[uplink]
	if !ok {
		l, err := k.getLink(uplink, 0)
		if err != nil {
			return nil, err
		}
		index = l.index
	}
	return &netlink.Neigh{
		LinkIndex: index,
		Family:    family(ip),
		Flags:     netlink.NTF_PROXY,
		IP:        ip.AsSlice(),
	}, nil
}

// AddProxy looks the uplink up first, so that a vanished one is ErrNoLink
// rather than a failed sysctl write.
func (k *Netlink) AddProxy(uplink string, ip netip.Addr) error {
	n, err := k.proxyNeigh(uplink, ip)
	if err == nil {
		err = enableProxy(uplink, ip)
		if err != nil {
			return err
		}
		err = k.nl().NeighAdd(n)
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return errorf(ErrHost, "adding proxy neighbour %s on %s: %w", ip, uplink, err)
	}
	return nil
}

func (k *Netlink) DelProxy(uplink string, ip netip.Addr) error {
	n, err := k.proxyNeigh(uplink, ip)
	if errors.Is(err, ErrNoLink) {
		return nil // the uplink went, and its entries with it
	}
	if err == nil {
		err = k.nl().NeighDel(n)
	}
	// ENODEV: the uplink went since this invocation looked it up.
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		return errorf(ErrHost, "removing proxy neighbour %s on %s: %w", ip, uplink, err)
	}
	return nil
}

// HasProxy asks the kernel for the one entry (RTM_GETNEIGH with
// NTF_PROXY, Linux 5.0 and later), on this package's own socket since the
// netlink library has no such request: a listing of the uplink's proxy
// entries grows with the IPs held as routes, and ADD asks before each IP
// it gives its first proxy entry.
func (k *Netlink) HasProxy(uplink string, ip netip.Addr) (bool, error) {
	n, err := k.proxyNeigh(uplink, ip)
	if err != nil {
		return false, errorf(ErrDrift, "uplink %s of %s: %w", uplink, ip, err)
	}
	c, err := k.rt()
	if err == nil {
		req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
		req.AddData(&netlink.Ndmsg{Family: uint8(n.Family), Index: uint32(n.LinkIndex), Flags: netlink.NTF_PROXY})
		req.AddData(nl.NewRtAttr(netlink.NDA_DST, ip.AsSlice()))
		err = c.execute(req, func(syscall.NetlinkMessage) {})
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
		return k.listedProxy(n.LinkIndex, ip) // a kernel before 5.0
	}
	return false, errorf(ErrHost, "looking up proxy neighbour %s on %s: %w", ip, uplink, err)
}

// listedProxy finds ip among the proxy entries on link index.
func (k *Netlink) listedProxy(index int, ip netip.Addr) (bool, error) {
	entries, err := k.nl().NeighProxyList(index, family(ip))
	if err != nil {
		return false, errorf(ErrHost, "listing proxy neighbours on %s: %w", k.LinkName(index), err)
	}
	for _, e := range entries {
		if got, ok := netip.AddrFromSlice(e.IP); ok && got.Unmap() == ip {
			return true, nil
		}
	}
	return false, nil
}

func (k *Netlink) ProxyEntries() ([]ProxyEntry, error) {
	var entries []netlink.Neigh
	err := retryDump(func() (err error) {
		entries, err = k.nl().NeighProxyList(0, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		return nil, errorf(ErrHost, "listing proxy neighbours: %w", err)
	}
	names := map[int]string{}
	out := make([]ProxyEntry, 0, len(entries))
	for _, e := range entries {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if _, known := names[e.LinkIndex]; !known {
			names[e.LinkIndex] = k.LinkName(e.LinkIndex)
		}
		out = append(out, ProxyEntry{IP: ip, Link: names[e.LinkIndex]})
	}
	return out, nil
}

// sysctl reads a setting under /proc/sys/net with open, read and close
// alone. os.ReadFile makes nine calls of one read: it also asks the
// file's flags twice, registers it with the runtime's poller (procfs
// files are pollable) and takes it off again, and asks its size; and the
// registration wakes the poller's idle thread on the other core, once per
// read. A steered ADD reads three settings, a DEL one: 18 and 6 calls
// fewer (strace). The paired bench could not tell this alone from its
// noise (ADD CPU +0.03 ms, 95% CI -0.04 to +0.10, exec floor 1.58 ms);
// with the socket of rtConn it is part of the figure there.
func sysctl(key string) (int, error) {
	path := "/proc/sys/net/" + key
	fd, err := retryEINTR(func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var b [64]byte
	n, err := retryEINTR(func() (int, error) { return unix.Read(fd, b[:]) })
	if err != nil {
		return 0, &os.PathError{Op: "read", Path: path, Err: err}
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || n == len(b) {
		return 0, fmt.Errorf("%s: %q is not a number", key, b[:n])
	}
	return v, nil
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		if n, err := f(); err != unix.EINTR {
			return n, err
		}
	}
}
