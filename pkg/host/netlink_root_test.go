package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/external-ip/external-ip/pkg/store"
)

var rootSeq atomic.Int64

// inNetNS runs f in a namespace of its own with uplink up0 (a veth,
// 192.0.2.1/24 and 2001:db8:1::1/64, forwarding on) and a port-less bridge
// eip0, up, as the holder: the host kernel as the plugin sees it.
func inNetNS(tb testing.TB, f func(k *Netlink, up Uplink, dev int)) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates a network namespace")
	}
	name := fmt.Sprintf("eipasg-%d-%d", os.Getpid(), rootSeq.Add(1))
	script := strings.ReplaceAll(`ip netns add NS
ip -n NS link add up0 type veth peer name peer0
ip -n NS link add eip0 type bridge
ip netns exec NS sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.up0.accept_dad=0
ip -n NS addr add 192.0.2.1/24 dev up0
ip -n NS addr add 2001:db8:1::1/64 dev up0 nodad
ip -n NS link set up0 up
ip -n NS link set peer0 up
ip -n NS link set eip0 up`, "NS", name)
	if out, err := exec.Command("sh", "-ec", script).CombinedOutput(); err != nil {
		tb.Fatalf("making namespace %s: %v: %s", name, err, out)
	}
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	netns, err := ns.GetNS("/var/run/netns/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	defer netns.Close()
	err = netns.Do(func(ns.NetNS) error {
		k := &Netlink{}
		up, err := k.UplinkByName("up0")
		if err != nil {
			return err
		}
		h, err := k.LookupHolder("eip0")
		if err != nil {
			return err
		}
		f(k, up, h.Index)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func TestHostKernelHoldsAnIPAsARouteAnsweredByAProxyEntry(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		for _, ip := range []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:ff::7")} {
			if added, err := k.AddRoute(dev, ip, 200); !added || err != nil {
				t.Fatalf("addRoute %s = %v, %v; want added", ip, added, err)
			}
			if added, err := k.AddRoute(dev, ip, 200); added || err != nil {
				t.Errorf("second addRoute %s = %v, %v; want nothing changed and no error", ip, added, err)
			}
			r, err := k.Lookup(ip)
			if err != nil || r.Local != 0 || r.On(ip) != dev || r.Proto != 200 {
				t.Errorf("lookup %s = %+v, %v; want a host route through the holder (%d) of protocol 200, not local", ip, r, err, dev)
			}
			if m, err := k.MainRoute(ip, dev); err != nil || m.Dev == dev {
				t.Errorf("mainRoute %s past the holder = %+v, %v; want a route not through it", ip, m, err)
			}
			if routes, err := k.HolderRoutes(dev); err != nil || routes[ip] != 200 {
				t.Errorf("holderRoutes = %v, %v; want %s with protocol 200", routes, err, ip)
			}
			if err := k.AddProxy(up.Name, ip); err != nil {
				t.Fatalf("addProxy %s: %v", ip, err)
			}
			if has, err := k.HasProxy(up.Name, ip); !has || err != nil {
				t.Errorf("hasProxy %s = %v, %v after addProxy", ip, has, err)
			}
			if entries, err := k.ProxyEntries(); err != nil || !slices.Contains(entries, ProxyEntry{IP: ip, Link: up.Name}) {
				t.Errorf("proxyEntries = %v, %v; want %s on %s", entries, err, ip, up.Name)
			}
			fam := "ipv4"
			if ip.Is6() {
				fam = "ipv6"
			}
			if v, err := sysctl(fam + "/neigh/" + up.Name + "/proxy_delay"); v != 0 || err != nil {
				t.Errorf("%s proxy_delay on %s is %d (%v), want 0: the first answer would wait up to 0.8 s", fam, up.Name, v, err)
			}
			if removed, err := k.DelRoute(dev, ip); !removed || err != nil {
				t.Errorf("delRoute %s = %v, %v; want removed", ip, removed, err)
			}
			if removed, err := k.DelRoute(dev, ip); removed || err != nil {
				t.Errorf("second delRoute %s = %v, %v; want nothing and no error", ip, removed, err)
			}
			if err := k.DelProxy(up.Name, ip); err != nil {
				t.Errorf("delProxy %s: %v", ip, err)
			}
			if has, err := k.HasProxy(up.Name, ip); has || err != nil {
				t.Errorf("hasProxy %s = %v, %v after delProxy", ip, has, err)
			}
		}
	})
}

func TestHostKernelReachableAsksForwardingOfARouteAndArpIgnoreOfAnAddress(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		write := func(key string, v int) {
			if err := os.WriteFile("/proc/sys/net/"+key, []byte(fmt.Sprint(v)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("ipv4/conf/all/arp_ignore", 1)
		if err := k.Reachable(up, false, store.AsAddress); !errors.Is(err, ErrUnreachable) {
			t.Errorf("an address with arp_ignore 1: %v, want ErrUnreachable", err)
		}
		if err := k.Reachable(up, false, store.HeldAs(200)); err != nil {
			t.Errorf("a route with arp_ignore 1 and forwarding on: %v", err)
		}
		write("ipv4/conf/up0/forwarding", 0)
		if err := k.Reachable(up, false, store.HeldAs(200)); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "ipv4.conf.up0.forwarding") {
			t.Errorf("a route with forwarding off on the uplink: %v, want ErrUnreachable naming it", err)
		}
	})
}

// BenchmarkHoldAndRelease compares the kernel requests of holding and
// releasing one IP as an address and as a route: the cost route mode adds
// to ADD and DEL, without the process around it. Each sub-benchmark makes
// its namespace inside its own goroutine, whose thread the sysctl writes
// use (the netlink socket is bound to the namespace, /proc/sys/net is not).
func BenchmarkHoldAndRelease(b *testing.B) {
	for _, ip := range []netip.Addr{netip.MustParseAddr("198.51.100.9"), netip.MustParseAddr("2001:db8:ff::9")} {
		for _, m := range []struct {
			name string
			h    store.HeldAs
		}{{"address", store.AsAddress}, {"route", store.HeldAs(200)}} {
			b.Run(fmt.Sprintf("%s %s", m.name, famOf(ip)), func(b *testing.B) {
				inNetNS(b, func(k *Netlink, up Uplink, dev int) {
					b.ResetTimer()
					for range b.N {
						if err := holdOnce(k, up, dev, ip, m.h); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

func famOf(ip netip.Addr) string {
	if ip.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// holdOnce makes the kernel requests hold and unhold make for ip.
func holdOnce(k *Netlink, up Uplink, dev int, ip netip.Addr, h store.HeldAs) error {
	var err error
	if h.Route() {
		_, err = k.AddRoute(dev, ip, int(h))
	} else {
		_, err = k.AddAddr(dev, ip)
	}
	if err == nil && NeedsProxy(ip, h) {
		err = k.AddProxy(up.Name, ip)
	}
	if err != nil {
		return err
	}
	if h.Route() {
		_, err = k.DelRoute(dev, ip)
	} else {
		_, err = k.DelAddr(dev, ip)
	}
	if err == nil && NeedsProxy(ip, h) {
		err = k.DelProxy(up.Name, ip)
	}
	return err
}

// A bridge with ports is no holder: LookupHolder counts them (a dump
// filtered by master, on the package's own socket) and Judge refuses it.
func TestHostKernelCountsABridgesPortsSoThatJudgeRefusesIt(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		if err := k.nl().LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br1"}}); err != nil {
			t.Fatal(err)
		}
		br, err := k.LookupHolder("br1")
		if err != nil || br.Kind != "bridge" || br.Ports != 0 {
			t.Fatalf("LookupHolder(br1) = %+v, %v; want a bridge with no ports", br, err)
		}
		for _, name := range []string{"p1", "p2"} {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MasterIndex: br.Index}, PeerName: name + "x"}
			if err := k.nl().LinkAdd(veth); err != nil {
				t.Fatal(err)
			}
		}
		if br, err = k.LookupHolder("br1"); err != nil || br.Ports != 2 {
			t.Fatalf("LookupHolder(br1) = %+v, %v; want 2 ports", br, err)
		}
		h := NewHolder(k, Device{Name: "br1", DataDir: "/run/x"})
		if _, err := h.Judge(br); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "bridge with 2 ports") {
			t.Errorf("Judge(br1 with 2 ports) = %v, want refused as a bridge with 2 ports", err)
		}
		if holder, err := k.LookupHolder("eip0"); err != nil || holder.Ports != 0 || holder.Index != dev {
			t.Errorf("LookupHolder(eip0) = %+v, %v; want the port-less holder %d", holder, err, dev)
		}
	})
}

// LookupHolder and UplinkByName/ByIndex read links themselves (getLink):
// what they say of each kind of link must be what the netlink library's
// full reading says, and a missing link must stay "missing" (no holder
// yet; ErrNoLink for an uplink, whose proxy entry is then gone with it).
func TestHostKernelReadsEachLinkAsTheNetlinkLibraryDoes(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		if err := k.nl().LinkSetAlias(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}, HolderAlias("/run/x")); err != nil {
			t.Fatal(err)
		}
		if err := k.nl().LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "down0"}}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"eip0", "up0", "peer0", "lo", "down0"} {
			link, err := k.nl().LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			a := link.Attrs()
			want := Link{Index: a.Index, Kind: link.Type(), Alias: a.Alias, Up: a.Flags&net.FlagUp != 0}
			if got, err := k.LookupHolder(name); err != nil || (got != Link{Index: want.Index, Kind: want.Kind, Alias: want.Alias, Up: want.Up, Ports: got.Ports}) {
				t.Errorf("LookupHolder(%s) = %+v, %v; the library says %+v", name, got, err, want)
			}
			fwd, _ := sysctl("ipv6/conf/" + name + "/forwarding")
			wantUp := Uplink{Name: a.Name, Index: a.Index, MAC: a.HardwareAddr, Router: fwd > 0,
				Down: a.Flags&net.FlagUp == 0, NoCarrier: a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown}
			byName, err := k.UplinkByName(name)
			if len(a.HardwareAddr) != 6 {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no Ethernet hardware address") {
					t.Errorf("UplinkByName(%s) = %v; the library reads no MAC, so want it refused for that", name, err)
				}
				continue
			}
			if err != nil || !reflect.DeepEqual(byName, wantUp) {
				t.Errorf("UplinkByName(%s) = %+v, %v; the library says %+v", name, byName, err, wantUp)
			}
			if byIndex, err := k.UplinkByIndex(a.Index); err != nil || !reflect.DeepEqual(byIndex, wantUp) {
				t.Errorf("UplinkByIndex(%d) = %+v, %v; the library says %+v", a.Index, byIndex, err, wantUp)
			}
		}
		if got, err := k.LookupHolder("nosuch0"); err != nil || got != (Link{}) {
			t.Errorf("LookupHolder(nosuch0) = %+v, %v; want no device and no error", got, err)
		}
		if _, err := k.UplinkByName("nosuch0"); !errors.Is(err, ErrNoLink) || !errors.Is(err, ErrRefused) {
			t.Errorf("UplinkByName(nosuch0) = %v; want ErrRefused and ErrNoLink", err)
		}
		if _, err := k.UplinkByIndex(99999); !errors.Is(err, ErrNoLink) {
			t.Errorf("UplinkByIndex(99999) = %v; want ErrNoLink", err)
		}
		ip := netip.MustParseAddr("198.51.100.8")
		if err := k.DelProxy("nosuch0", ip); err != nil {
			t.Errorf("DelProxy on a vanished uplink = %v; want nil (its entries went with it)", err)
		}
		if _, err := k.HasProxy("nosuch0", ip); !errors.Is(err, ErrNoLink) || !errors.Is(err, ErrDrift) {
			t.Errorf("HasProxy on a vanished uplink = %v; want ErrDrift and ErrNoLink", err)
		}
	})
}
