package conntrack

import (
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var (
	ext4, ext4b = netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	ext6        = netip.MustParseAddr("2001:db8:1::10")
	ctrA, ctrB  = netip.MustParseAddr("10.88.0.5"), netip.MustParseAddr("10.88.0.6")
	ctrA6       = netip.MustParseAddr("fd00:88::5")
	ctrB6       = netip.MustParseAddr("fd00:88::6")
)

// inNetNS runs f on a thread of its own in a fresh network namespace,
// whose conntrack table is empty; the thread ends with the test, and the
// namespace with it.
func inNetNS(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and conntrack entries")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread goes with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		f()
	}()
	<-done
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctFlow(src, dst, replySrc, replyDst netip.Addr, sport uint16) *netlink.ConntrackFlow {
	fam := uint8(unix.AF_INET)
	if src.Is6() {
		fam = unix.AF_INET6
	}
	return &netlink.ConntrackFlow{
		FamilyType: fam,
		Forward:    netlink.IPTuple{SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: sport, DstPort: 80},
		Reverse:    netlink.IPTuple{SrcIP: replySrc.AsSlice(), DstIP: replyDst.AsSlice(), Protocol: unix.IPPROTO_UDP, SrcPort: 80, DstPort: sport},
		TimeOut:    100,
	}
}

func TestForgetTargetDeletesOnlyTheLeavingTargetsEntries(t *testing.T) {
	inNetNS(t, func() {
		client := netip.MustParseAddr("198.51.100.7")
		other := netip.MustParseAddr("198.51.100.8")
		createFlows(t, []*netlink.ConntrackFlow{
			ctFlow(client, ext4, ctrA, client, 1000), // to A via the external IP
			ctFlow(client, ext4, ctrB, client, 1001), // to B via the external IP
			ctFlow(client, ctrA, ctrA, client, 1002), // straight to A, not ours
			ctFlow(ctrA, other, other, ext4, 1003),   // A's egress from the external IP
		})
		// Not NATed, though its tuples read as if DNATed to A: not ours.
		if err := netlink.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, ctFlow(client, ext4, ctrA, client, 1004)); err != nil {
			t.Fatal(err)
		}
		ct, err := Open()
		must(t, err)
		defer ct.Close()
		n, err := ct.ForgetTarget(ext4, ctrA)
		must(t, err)
		if n != 1 {
			t.Errorf("ForgetTarget deleted %d entries, want the one DNATed to %s", n, ctrA)
		}
		n, err = ct.ForgetIP(ext4)
		must(t, err)
		if n != 2 {
			t.Errorf("ForgetIP deleted %d entries, want B's and the egress one", n)
		}
		left, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		must(t, err)
		slices.SortFunc(left, func(a, b *netlink.ConntrackFlow) int { return int(a.Forward.SrcPort) - int(b.Forward.SrcPort) })
		if len(left) != 2 || left[0].Forward.SrcPort != 1002 || left[1].Forward.SrcPort != 1004 {
			t.Errorf("left %d entries, want only the flow straight to A and the one not NATed: %v", len(left), left)
		}
	})
}
