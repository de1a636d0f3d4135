package assigner

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/external-ip/external-ip/pkg/host"
)

// fakeLink is one interface of the fake host. Kind is "dummy" or "bridge"
// (which the assigner may adopt) or anything else for a real NIC.
type fakeLink struct {
	Name  string              `json:"name"`
	Index int                 `json:"index"`
	Kind  string              `json:"kind"`
	Alias string              `json:"alias"`
	Up    bool                `json:"up"`
	Ports int                 `json:"ports"`
	Addrs map[netip.Addr]bool `json:"addrs"`
	// Routes are the host routes through the link, with their protocol.
	Routes map[netip.Addr]int `json:"routes,omitempty"`
}

// fakeHost is the part of the fake kernel that the assigner changes. It is
// plain data so that child processes can share it through a file.
type fakeHost struct {
	Links   map[int]*fakeLink              `json:"links"`
	Next    int                            `json:"next"`
	Proxies map[string]map[netip.Addr]bool `json:"proxies"`
	// Violations lists every attempt to change an interface the assigner
	// did not create: the one thing it must never do.
	Violations []string `json:"violations"`
}

func (h *fakeHost) byName(name string) *fakeLink {
	for _, l := range h.Links {
		if l.Name == name {
			return l
		}
	}
	return nil
}

func (h *fakeHost) addLink(name, kind, alias string, up bool) *fakeLink {
	h.Next++
	l := &fakeLink{Name: name, Index: h.Next, Kind: kind, Alias: alias, Up: up, Addrs: map[netip.Addr]bool{}}
	h.Links[l.Index] = l
	return l
}

// fakeUplink is an uplink's announce-side facts, which never change in a test.
type fakeUplink struct {
	index     int
	mac       net.HardwareAddr
	down      bool
	noCarrier bool
}

// fakeKernel is an in-memory host for the assigner: links and their
// addresses, a routing table programmed per IP or per prefix, uplinks,
// sysctls and proxy neighbour entries. With path set, the host lives in a
// file under a flock so that processes share it. It counts calls per method
// and can fail a method, or a method for one IP, on demand.
type fakeKernel struct {
	mu      sync.Mutex
	host    fakeHost
	path    string
	routes  map[netip.Addr]host.Route
	nets    []host.Route
	uplinks map[string]fakeUplink
	sysctls map[string]int
	fail    map[string]error
	calls   map[string]int
	// after, when set, runs after each kernel request, outside the fake's
	// lock: a test uses it to act between two requests of one invocation.
	after func(method string)
	// routeLag plays the kernel's IPv6 local route that trails the
	// address: the FIB does not yet say an IPv6 address is local.
	routeLag bool
}

var _ host.Kernel = (*fakeKernel)(nil)

// The fake host's fixed interfaces and subnets.
const (
	ethIndex  = 2
	eth1Index = 3
)

var (
	ethMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	eth1MAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	// nodeIP is eth0's own address: an IP the assigner must refuse.
	nodeIP = netip.MustParseAddr("192.0.2.10")
)

// newFakeKernel returns a host with lo, eth0 and eth1, both uplinks
// reachable (arp_ignore 0, IPv6 forwarding 1), connected routes
// 192.0.2.0/24 and 198.51.100.0/24 and 2001:db8::/64 on eth0 and
// 203.0.113.0/24 on eth1, and no default route. It fails the test if the
// assigner ever touched an interface that is not its holder.
func newFakeKernel(t testing.TB) *fakeKernel {
	k := &fakeKernel{
		host:    fakeHost{Links: map[int]*fakeLink{}, Proxies: map[string]map[netip.Addr]bool{}},
		routes:  map[netip.Addr]host.Route{},
		uplinks: map[string]fakeUplink{},
		sysctls: map[string]int{},
		fail:    map[string]error{},
		calls:   map[string]int{},
	}
	k.host.addLink("lo", "loopback", "", true)
	eth0 := k.host.addLink("eth0", "device", "", true)
	eth0.Addrs[nodeIP] = true
	k.host.addLink("eth1", "device", "", true)
	k.uplinks["eth0"] = fakeUplink{index: ethIndex, mac: ethMAC}
	k.uplinks["eth1"] = fakeUplink{index: eth1Index, mac: eth1MAC}
	for _, dev := range []string{"all", "eth0", "eth1"} {
		k.sysctls["ipv4/conf/"+dev+"/arp_ignore"] = 0
		k.sysctls["ipv6/conf/"+dev+"/forwarding"] = 1
		k.sysctls["ipv4/conf/"+dev+"/forwarding"] = 1
	}
	k.addNet("192.0.2.0/24", ethIndex, true)
	k.addNet("198.51.100.0/24", ethIndex, true)
	k.addNet("2001:db8::/64", ethIndex, true)
	k.addNet("203.0.113.0/24", eth1Index, true)
	k.setRoute(nodeIP, host.Route{Local: ethIndex, Dev: ethIndex, Prefix: netip.PrefixFrom(nodeIP, 32)})
	t.Cleanup(func() {
		if v := k.violations(); len(v) > 0 {
			t.Errorf("the assigner changed interfaces it does not own: %q", v)
		}
	})
	return k
}

// persistTo moves the host into a file shared with other processes; a file
// that exists already is the host from then on.
func (k *fakeKernel) persistTo(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.path = path
	unlock, err := k.flock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return k.save(&k.host)
}

func (k *fakeKernel) flock() (func(), error) {
	f, err := os.OpenFile(k.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func (k *fakeKernel) load() (*fakeHost, error) {
	b, err := os.ReadFile(k.path)
	if err != nil {
		return nil, err
	}
	h := &fakeHost{}
	return h, json.Unmarshal(b, h)
}

func (k *fakeKernel) save(h *fakeHost) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp := k.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, k.path)
}

// with runs f on the host under the fake's locks, saving it when the host
// lives in a file. The test helpers use it directly; the kernel methods go
// through call, which also counts and injects failures.
func (k *fakeKernel) with(f func(h *fakeHost) error) error {
	if k.path == "" {
		return f(&k.host)
	}
	unlock, err := k.flock()
	if err != nil {
		return fmt.Errorf("fake kernel: %w", err)
	}
	defer unlock()
	h, err := k.load()
	if err != nil {
		return fmt.Errorf("fake kernel: %w", err)
	}
	if err := f(h); err != nil {
		return err
	}
	if err := k.save(h); err != nil {
		return fmt.Errorf("fake kernel: %w", err)
	}
	return nil
}

// call is one kernel request: counted, then failed if the test asked for
// it (for the method, or the method and this IP), else carried out.
func (k *fakeKernel) call(method string, ip netip.Addr, f func(h *fakeHost) error) error {
	k.mu.Lock()
	after := k.after
	err := k.request(method, ip, f)
	k.mu.Unlock()
	if after != nil {
		after(method)
	}
	return err
}

func (k *fakeKernel) request(method string, ip netip.Addr, f func(h *fakeHost) error) error {
	k.calls[method]++
	if err := k.fail[method]; err != nil {
		return err
	}
	if ip.IsValid() {
		if err := k.fail[method+" "+ip.String()]; err != nil {
			return err
		}
	}
	return k.with(f)
}

func (k *fakeKernel) LookupHolder(name string) (host.Link, error) {
	var out host.Link
	err := k.call("lookupHolder", netip.Addr{}, func(h *fakeHost) error {
		if l := h.byName(name); l != nil {
			out = host.Link{Index: l.Index, Kind: l.Kind, Alias: l.Alias, Up: l.Up, Ports: l.Ports}
		}
		return nil
	})
	return out, err
}

// createHolder makes a dummy, down, as the host kernel's does.
func (k *fakeKernel) CreateHolder(name, temp, alias string) (int, error) {
	var dev int
	err := k.call("createHolder", netip.Addr{}, func(h *fakeHost) error {
		if h.byName(temp) != nil {
			return Errorf(ErrHost, "creating holder device %s (as %s): file exists", name, temp)
		}
		dev = h.addLink(temp, "dummy", alias, false).Index
		return nil
	})
	return dev, err
}

func (k *fakeKernel) RenameHolder(dev int, name string) error {
	return k.call("renameHolder", netip.Addr{}, func(h *fakeHost) error {
		l, err := ours(h, dev, "renaming", netip.Addr{})
		if err != nil || l == nil {
			return cmp.Or(err, Errorf(ErrHost, "renaming holder device %d: no such device", dev))
		}
		if h.byName(name) != nil {
			return Errorf(ErrRefused, "device %s: appeared while external-ip was making its holder there", name)
		}
		l.Name = name
		return nil
	})
}

func (k *fakeKernel) RemoveHalfMade(temp, alias string) (bool, error) {
	var removed bool
	err := k.call("removeHalfMade", netip.Addr{}, func(h *fakeHost) error {
		l := h.byName(temp)
		if l == nil || (l.Kind != "dummy" && l.Kind != "bridge") || l.Ports > 0 || (l.Alias != "" && l.Alias != alias) {
			return nil
		}
		delete(h.Links, l.Index)
		removed = true
		return nil
	})
	return removed, err
}

func (k *fakeKernel) MarkHolder(dev int, alias string) error {
	return k.call("markHolder", netip.Addr{}, func(h *fakeHost) error {
		l, err := ours(h, dev, "marking", netip.Addr{})
		if err == nil && l != nil {
			l.Alias = alias
		}
		return err
	})
}

func (k *fakeKernel) SetHolderUp(dev int) error {
	return k.call("setHolderUp", netip.Addr{}, func(h *fakeHost) error {
		l, err := ours(h, dev, "setting up", netip.Addr{})
		if err == nil && l != nil {
			l.Up = true
		}
		return err
	})
}

func (k *fakeKernel) ProxyEntries() ([]host.ProxyEntry, error) {
	var out []host.ProxyEntry
	err := k.call("proxyEntries", netip.Addr{}, func(h *fakeHost) error {
		for link, set := range h.Proxies {
			for _, ip := range sortedAddrs(set) {
				out = append(out, host.ProxyEntry{IP: ip, Link: link})
			}
		}
		return nil
	})
	return out, err
}

// ours finds the holder by index, noting any attempt on another interface.
func ours(h *fakeHost, dev int, what string, ip netip.Addr) (*fakeLink, error) {
	l := h.Links[dev]
	if l == nil {
		return nil, nil
	}
	if !strings.HasPrefix(l.Alias, host.HolderMark) {
		h.Violations = append(h.Violations, fmt.Sprintf("%s %s on %s", what, ip, l.Name))
		return nil, Errorf(ErrHost, "fake kernel: %s %s on %s, which is not a holder", what, ip, l.Name)
	}
	return l, nil
}

func (k *fakeKernel) AddAddr(dev int, ip netip.Addr) (bool, error) {
	var added bool
	err := k.call("addAddr", ip, func(h *fakeHost) error {
		l, err := ours(h, dev, "adding", ip)
		if err != nil {
			return err
		}
		if l == nil {
			return Errorf(ErrHost, "adding %s to holder device %d: no such device", ip, dev)
		}
		added = !l.Addrs[ip]
		l.Addrs[ip] = true
		return nil
	})
	return added, err
}

func (k *fakeKernel) DelAddr(dev int, ip netip.Addr) (bool, error) {
	var removed bool
	err := k.call("delAddr", ip, func(h *fakeHost) error {
		l, err := ours(h, dev, "removing", ip)
		if l == nil || err != nil {
			return err // a missing device has no addresses: not an error
		}
		removed = l.Addrs[ip]
		delete(l.Addrs, ip)
		return nil
	})
	return removed, err
}

func (k *fakeKernel) LinkName(index int) string {
	name := fmt.Sprintf("index %d", index)
	k.call("linkName", netip.Addr{}, func(h *fakeHost) error {
		if l := h.Links[index]; l != nil {
			name = l.Name
		}
		return nil
	})
	return name
}

func (k *fakeKernel) OtherHolders(skip int) (bool, error) {
	var found bool
	err := k.call("otherHolders", netip.Addr{}, func(h *fakeHost) error {
		for _, l := range h.Links {
			found = found || l.Index != skip && strings.HasPrefix(l.Alias, host.HolderMark)
		}
		return nil
	})
	return found, err
}

func (k *fakeKernel) HolderAddrs(dev int) ([]netip.Addr, error) {
	var out []netip.Addr
	err := k.call("holderAddrs", netip.Addr{}, func(h *fakeHost) error {
		if l := h.Links[dev]; l != nil {
			out = sortedAddrs(l.Addrs)
		}
		return nil
	})
	return out, err
}

// lookup answers as the FIB does: an address on any interface is local to
// it, then a host route through a link, then a route programmed for the
// IP, then the longest prefix.
func (k *fakeKernel) Lookup(ip netip.Addr) (host.Route, error) {
	var r host.Route
	err := k.call("lookup", ip, func(h *fakeHost) error {
		for _, l := range h.Links {
			if l.Addrs[ip] && !(k.routeLag && ip.Is6()) {
				r = host.Route{Local: l.Index, Dev: l.Index, Prefix: netip.PrefixFrom(ip, ip.BitLen())}
				return nil
			}
		}
		for _, l := range h.Links {
			if proto, ok := l.Routes[ip]; ok {
				r = host.Route{Dev: l.Index, Prefix: netip.PrefixFrom(ip, ip.BitLen()), Connected: true, Proto: proto}
				return nil
			}
		}
		if pr, ok := k.routes[ip]; ok {
			r = pr
			return nil
		}
		r = k.longest(ip)
		return nil
	})
	return r, err
}

func (k *fakeKernel) MainRoute(ip netip.Addr, skip int) (host.Route, error) {
	var r host.Route
	err := k.call("mainRoute", ip, func(h *fakeHost) error {
		for _, l := range h.Links {
			if proto, ok := l.Routes[ip]; ok && l.Index != skip {
				r = host.Route{Dev: l.Index, Prefix: netip.PrefixFrom(ip, ip.BitLen()), Connected: true, Proto: proto}
				return nil
			}
		}
		r = k.longest(ip)
		return nil
	})
	return r, err
}

func (k *fakeKernel) AddRoute(dev int, ip netip.Addr, proto int) (bool, error) {
	var added bool
	err := k.call("addRoute", ip, func(h *fakeHost) error {
		l, err := ours(h, dev, "routing", ip)
		if err != nil {
			return err
		}
		if l == nil {
			return Errorf(ErrHost, "adding route %s dev %d: no such device", ip, dev)
		}
		if l.Routes == nil {
			l.Routes = map[netip.Addr]int{}
		}
		_, had := l.Routes[ip]
		if !had {
			l.Routes[ip] = proto
		}
		added = !had
		return nil
	})
	return added, err
}

func (k *fakeKernel) DelRoute(dev int, ip netip.Addr) (bool, error) {
	var removed bool
	err := k.call("delRoute", ip, func(h *fakeHost) error {
		l, err := ours(h, dev, "unrouting", ip)
		if l == nil || err != nil {
			return err
		}
		_, removed = l.Routes[ip]
		delete(l.Routes, ip)
		return nil
	})
	return removed, err
}

func (k *fakeKernel) HolderRoutes(dev int) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	err := k.call("holderRoutes", netip.Addr{}, func(h *fakeHost) error {
		if l := h.Links[dev]; l != nil {
			out = maps.Clone(l.Routes)
		}
		return nil
	})
	if out == nil {
		out = map[netip.Addr]int{}
	}
	return out, err
}

func (k *fakeKernel) longest(ip netip.Addr) host.Route {
	best := host.Route{}
	for _, n := range k.nets {
		if n.Prefix.Contains(ip) && (best.Dev == 0 || n.Prefix.Bits() > best.Prefix.Bits()) {
			best = n
		}
	}
	return best
}

func (k *fakeKernel) UplinkByName(name string) (host.Uplink, error) {
	var up host.Uplink
	err := k.call("uplinkByName", netip.Addr{}, func(*fakeHost) error {
		var err error
		up, err = k.uplink(name)
		return err
	})
	return up, err
}

func (k *fakeKernel) UplinkByIndex(index int) (host.Uplink, error) {
	var up host.Uplink
	err := k.call("uplinkByIndex", netip.Addr{}, func(*fakeHost) error {
		for name, u := range k.uplinks {
			if u.index == index {
				var err error
				up, err = k.uplink(name)
				return err
			}
		}
		return Errorf(ErrRefused, "uplink with index %d: %w", index, host.ErrNoLink)
	})
	return up, err
}

func (k *fakeKernel) uplink(name string) (host.Uplink, error) {
	u, ok := k.uplinks[name]
	switch {
	case !ok:
		return host.Uplink{}, Errorf(ErrRefused, "uplink %s: %w", name, host.ErrNoLink)
	}
	return host.Uplink{Name: name, Index: u.index, MAC: u.mac, Router: k.sysctls["ipv6/conf/"+name+"/forwarding"] > 0, Down: u.down, NoCarrier: u.noCarrier}, nil
}

func (k *fakeKernel) Reachable(up host.Uplink, v6 bool, how heldAs) error {
	return k.call("reachable", netip.Addr{}, func(*fakeHost) error {
		if !v6 && how.Route() {
			key := "ipv4/conf/" + up.Name + "/forwarding"
			if k.sysctls[key] == 0 {
				return Errorf(ErrUnreachable, "net.%s is 0", strings.ReplaceAll(key, "/", "."))
			}
			return nil
		}
		if v6 {
			key := "ipv6/conf/" + up.Name + "/forwarding"
			if k.sysctls[key] == 0 {
				return Errorf(ErrUnreachable, "net.%s is 0", strings.ReplaceAll(key, "/", "."))
			}
			return nil
		}
		for _, dev := range []string{"all", up.Name} {
			key := "ipv4/conf/" + dev + "/arp_ignore"
			if v := k.sysctls[key]; v != 0 {
				return Errorf(ErrUnreachable, "net.%s is %d", strings.ReplaceAll(key, "/", "."), v)
			}
		}
		return nil
	})
}

func (k *fakeKernel) AddProxy(uplink string, ip netip.Addr) error {
	return k.call("addProxy", ip, func(h *fakeHost) error {
		if _, ok := k.uplinks[uplink]; !ok {
			return Errorf(ErrHost, "adding proxy neighbour %s on %s: %w", ip, uplink, host.ErrNoLink)
		}
		if h.Proxies[uplink] == nil {
			h.Proxies[uplink] = map[netip.Addr]bool{}
		}
		h.Proxies[uplink][ip] = true
		return nil
	})
}

func (k *fakeKernel) DelProxy(uplink string, ip netip.Addr) error {
	return k.call("delProxy", ip, func(h *fakeHost) error {
		delete(h.Proxies[uplink], ip)
		return nil
	})
}

func (k *fakeKernel) HasProxy(uplink string, ip netip.Addr) (bool, error) {
	var has bool
	err := k.call("hasProxy", ip, func(h *fakeHost) error {
		if _, ok := k.uplinks[uplink]; !ok {
			return Errorf(ErrDrift, "uplink %s of %s: %w", uplink, ip, host.ErrNoLink)
		}
		has = h.Proxies[uplink][ip]
		return nil
	})
	return has, err
}

// The helpers below program and inspect the fake; they are not kernel
// requests, so they are not counted.

func (k *fakeKernel) inspect(f func(h *fakeHost) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.with(f)
}

func (k *fakeKernel) addNet(prefix string, dev int, connected bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nets = append(k.nets, host.Route{Dev: dev, Prefix: netip.MustParsePrefix(prefix), Connected: connected})
}

func (k *fakeKernel) setRoute(ip netip.Addr, r host.Route) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.routes[ip] = r
}

func (k *fakeKernel) setSysctl(key string, v int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sysctls[key] = v
}

// failWith makes method fail with err; with a valid ip, only for that IP.
func (k *fakeKernel) failWith(method string, ip netip.Addr, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip.IsValid() {
		method += " " + ip.String()
	}
	k.fail[method] = err
}

// changeUplink edits an uplink's facts, as a person unplugging it would.
func (k *fakeKernel) changeUplink(name string, f func(u *fakeUplink)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	u := k.uplinks[name]
	f(&u)
	k.uplinks[name] = u
}

// dropUplink makes name vanish, as an unplugged USB NIC would.
// Its proxy entries go with it, as the kernel's do.
func (k *fakeKernel) dropUplink(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.uplinks, name)
	k.with(func(h *fakeHost) error { delete(h.Proxies, name); return nil })
}

func (k *fakeKernel) setAfter(f func(method string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.after = f
}

func (k *fakeKernel) count(method string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[method]
}

func (k *fakeKernel) resetCounts() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.calls)
}

// mustInspect is inspect for helpers that cannot fail without breaking the test.
func (k *fakeKernel) mustInspect(t testing.TB, f func(h *fakeHost)) {
	t.Helper()
	if err := k.inspect(func(h *fakeHost) error { f(h); return nil }); err != nil {
		t.Fatalf("fake kernel: %v", err)
	}
}

// link returns a copy of the named link, nil if there is none.
func (k *fakeKernel) link(t testing.TB, name string) *fakeLink {
	t.Helper()
	var out *fakeLink
	k.mustInspect(t, func(h *fakeHost) {
		if l := h.byName(name); l != nil {
			c := *l
			c.Addrs = cloneSet(l.Addrs)
			c.Routes = maps.Clone(l.Routes)
			out = &c
		}
	})
	return out
}

// addrs lists the addresses on the named link, none if it is missing.
func (k *fakeKernel) addrs(t testing.TB, name string) []netip.Addr {
	t.Helper()
	if l := k.link(t, name); l != nil {
		return sortedAddrs(l.Addrs)
	}
	return nil
}

func (k *fakeKernel) proxies(t testing.TB, uplink string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	k.mustInspect(t, func(h *fakeHost) { out = sortedAddrs(h.Proxies[uplink]) })
	return out
}

// changeLink edits the named link as a person or another program would.
func (k *fakeKernel) changeLink(t testing.TB, name string, f func(l *fakeLink)) {
	t.Helper()
	k.mustInspect(t, func(h *fakeHost) {
		l := h.byName(name)
		if l == nil {
			t.Fatalf("fake kernel: no link %s to change", name)
		}
		f(l)
	})
}

func (k *fakeKernel) addLink(t testing.TB, name, kind, alias string, up bool) {
	t.Helper()
	k.mustInspect(t, func(h *fakeHost) { h.addLink(name, kind, alias, up) })
}

func (k *fakeKernel) deleteLink(t testing.TB, name string) {
	t.Helper()
	k.mustInspect(t, func(h *fakeHost) {
		if l := h.byName(name); l != nil {
			delete(h.Links, l.Index)
		}
	})
}

func (k *fakeKernel) removeProxy(t testing.TB, uplink string, ip netip.Addr) {
	t.Helper()
	k.mustInspect(t, func(h *fakeHost) { delete(h.Proxies[uplink], ip) })
}

func (k *fakeKernel) violations() []string {
	var out []string
	k.inspect(func(h *fakeHost) error { out = slices.Clone(h.Violations); return nil })
	return out
}

// snapshot is the whole host as text, to prove that an operation changed
// nothing on it.
func (k *fakeKernel) snapshot(t testing.TB) string {
	t.Helper()
	var b []byte
	k.mustInspect(t, func(h *fakeHost) {
		var err error
		if b, err = json.Marshal(h); err != nil {
			t.Fatalf("fake kernel: %v", err)
		}
	})
	return string(b)
}

func sortedAddrs(set map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(set))
	for ip, ok := range set {
		if ok {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func cloneSet(set map[netip.Addr]bool) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(set))
	for ip, ok := range set {
		out[ip] = ok
	}
	return out
}

// TestFakeKernelSharesItsHostThroughAFile guards the process tests: a host
// persisted by one fake must be the host another fake sees.
func TestFakeKernelSharesItsHostThroughAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host.json")
	a, b := newFakeKernel(t), newFakeKernel(t)
	if err := a.persistTo(path); err != nil {
		t.Fatalf("persisting the first fake: %v", err)
	}
	if err := b.persistTo(path); err != nil {
		t.Fatalf("persisting the second fake: %v", err)
	}
	dev, err := a.CreateHolder("eip0", "eipnew1", host.HolderAlias("/data"))
	if err == nil {
		err = a.RenameHolder(dev, "eip0")
	}
	if err != nil || dev == 0 {
		t.Fatalf("creating the holder through the first fake: index %d, %v", dev, err)
	}
	ip := netip.MustParseAddr("198.51.100.7")
	if _, err := a.AddAddr(dev, ip); err != nil {
		t.Fatalf("adding %s through the first fake: %v", ip, err)
	}
	if got := b.addrs(t, "eip0"); !slices.Equal(got, []netip.Addr{ip}) {
		t.Errorf("the second fake sees %v on eip0, want the [%s] the first one added", got, ip)
	}
	if r, _ := b.Lookup(ip); r.Local != dev {
		t.Errorf("the second fake's FIB says %s is local to %d, want the holder %d", ip, r.Local, dev)
	}
	if err := b.DelProxy("eth0", ip); err != nil {
		t.Errorf("removing an absent proxy entry: %v, want no error", err)
	}
}
