package announce

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/test/wire"
)

// Interface names are per namespace, so every pair can reuse them.
const (
	nodeIf = "up0"
	lanIf  = "lan0"
)

// nsSeq keeps namespace names unique within one test binary; the PID keeps
// them unique across binaries running at once.
var nsSeq atomic.Int64

// link is a node with one uplink, wired by a veth pair to a LAN namespace
// where frames are captured as a neighbour would receive them.
type link struct {
	nodeName  string
	node, lan ns.NetNS
	uplink    Uplink
	linkLocal netip.Addr // the node uplink's fe80:: address
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and raw sockets")
	}
}

// newLink creates two namespaces joined by a veth pair, both ends up and the
// node end's link-local address usable, and removes them when t ends.
func newLink(t *testing.T) *link {
	t.Helper()
	requireRoot(t)
	node, lan := newNetNS(t, "node"), newNetNS(t, "lan")
	ip(t, "-n", node, "link", "add", nodeIf, "type", "veth", "peer", "name", lanIf, "netns", lan)
	l := &link{nodeName: node, node: openNetNS(t, node), lan: openNetNS(t, lan)}
	// Without DAD the link-local address is usable as soon as the link is
	// up, instead of one to two seconds later.
	setSysctl(t, l.node, "net/ipv6/conf/"+nodeIf+"/accept_dad", "0")
	setSysctl(t, l.lan, "net/ipv6/conf/"+lanIf+"/accept_dad", "0")
	ip(t, "-n", lan, "link", "set", lanIf, "up")
	ip(t, "-n", node, "link", "set", nodeIf, "up")
	l.uplink, l.linkLocal = waitUplink(t, l.node)
	return l
}

func newNetNS(t *testing.T, role string) string {
	t.Helper()
	name := fmt.Sprintf("eip-announce-%s-%d-%d", role, os.Getpid(), nsSeq.Add(1))
	ip(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("removing namespace %s: %v: %s", name, err, out)
		}
	})
	return name
}

func openNetNS(t *testing.T, name string) ns.NetNS {
	t.Helper()
	n, err := ns.GetNS(filepath.Join("/var/run/netns", name))
	if err != nil {
		t.Fatalf("opening namespace %s: %v", name, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// setSysctl writes under /proc/sys from inside n: /proc/sys/net shows the
// namespace of the thread that opens it.
func setSysctl(t *testing.T, n ns.NetNS, key, value string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	})
	if err != nil {
		t.Fatalf("setting %s=%s: %v", key, value, err)
	}
}

// waitUplink returns the node's uplink once it has a link-local address that
// is not tentative: the kernel sends an NA from nothing else.
func waitUplink(t *testing.T, node ns.NetNS) (Uplink, netip.Addr) {
	t.Helper()
	var up Uplink
	var ll netip.Addr
	deadline := time.Now().Add(5 * time.Second)
	for !ll.IsValid() {
		if time.Now().After(deadline) {
			t.Fatalf("%s got no usable link-local address within 5s", nodeIf)
		}
		time.Sleep(10 * time.Millisecond)
		err := node.Do(func(ns.NetNS) error {
			var err error
			up, ll, err = uplinkState(nodeIf)
			return err
		})
		if err != nil {
			t.Fatalf("reading %s: %v", nodeIf, err)
		}
	}
	return up, ll
}

func uplinkState(name string) (Uplink, netip.Addr, error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return Uplink{}, netip.Addr{}, err
	}
	a := l.Attrs()
	up := Uplink{Name: name, Index: a.Index, MAC: a.HardwareAddr}
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return up, netip.Addr{}, err
	}
	for _, addr := range addrs {
		ip, ok := netip.AddrFromSlice(addr.IP)
		if ok && ip.IsLinkLocalUnicast() && addr.Flags&unix.IFA_F_TENTATIVE == 0 {
			return up, ip, nil
		}
	}
	return up, netip.Addr{}, nil
}

// frame is one frame received on the LAN side and when it arrived.
type frame = wire.Frame

// capture receives every frame reaching the LAN end of l, from now until t
// ends, stamped on arrival so that round spacing can be measured.
func (l *link) capture(t *testing.T) <-chan frame {
	t.Helper()
	var c *packet.Conn
	err := l.lan.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(lanIf)
		if err != nil {
			return err
		}
		c, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capturing on %s: %v", lanIf, err)
	}
	t.Cleanup(func() { c.Close() })
	return wire.Stream(c)
}

// collect takes frames that match until it has want of them or timeout
// passes, and returns what it has.
func collect(frames <-chan frame, match func([]byte) bool, want int, timeout time.Duration) []frame {
	var got []frame
	deadline := time.After(timeout)
	for len(got) < want {
		select {
		case f, ok := <-frames:
			if !ok {
				return got
			}
			if match(f.Data) {
				got = append(got, f)
			}
		case <-deadline:
			return got
		}
	}
	return got
}

// inNode runs f in the node's namespace, where the uplink's index means
// something and where a detached child inherits the namespace.
func (l *link) inNode(t *testing.T, f func() error) {
	t.Helper()
	if err := l.node.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}
