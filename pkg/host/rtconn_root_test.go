package host

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The package's own socket is not handed to the programs the plugin
// starts (the announcer, the conntrack runner), and Close gives it back.
func TestThePackagesOwnSocketIsCloseOnExecAndClosedByClose(t *testing.T) {
	k := &Netlink{}
	c, err := k.rt()
	if err != nil {
		t.Skipf("cannot open a NETLINK_ROUTE socket here: %v", err)
	}
	fd := c.fd
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the package's netlink socket has fd flags %#x (%v); want FD_CLOEXEC, or every child inherits it", flags, err)
	}
	k.Close()
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("after Close the socket's fd %d is still open (%v)", fd, err)
	}
}

// An answer left on the socket by an earlier request (one whose reader
// gave up early) must never be taken for a later request's: getLink asks
// for eip0 while the answer about lo waits first in the queue.
func TestAnAnswerLeftOnTheSocketIsNeverTakenForALaterRequests(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		c, err := k.rt()
		if err != nil {
			t.Fatal(err)
		}
		stale := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
		stale.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		stale.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("lo")))
		if err := unix.Sendto(c.fd, stale.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			t.Fatal(err)
		}
		h, err := k.LookupHolder("eip0")
		if err != nil || h.Index != dev || h.Kind != "bridge" {
			t.Errorf("LookupHolder(eip0) with lo's answer queued = %+v, %v; want the bridge %d: an earlier answer was taken", h, err, dev)
		}
		if u, err := k.UplinkByName("up0"); err != nil || u.Index != up.Index {
			t.Errorf("UplinkByName(up0) after it = %+v, %v; want index %d", u, err, up.Index)
		}
	})
}

// A link whose RTM_NEWLINK answer is larger than a dump's 32 KiB batch
// (here an uplink with 400 alternative names, 46 KB) is read by the
// netlink library, whose buffer is 64 KiB: getLink must read it too, not
// refuse the uplink with EMSGSIZE (as it did with a 32 KiB buffer).
func TestALinkWhoseAnswerIsOver32KiBIsReadAsTheNetlinkLibraryReadsIt(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		var b strings.Builder
		for i := range 400 {
			fmt.Fprintf(&b, "link property add dev up0 altname a%03d%s\n", i, strings.Repeat("x", 100))
		}
		cmd := exec.Command("ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("no alternative names here (Linux 5.5, iproute2 5.5): %v: %s", err, out)
		}
		if _, err := k.nl().LinkByName("up0"); err != nil {
			t.Fatalf("the library cannot read up0 either: %v", err)
		}
		fresh := &Netlink{} // no index kept from inNetNS's lookup
		defer fresh.Close()
		if got, err := fresh.UplinkByName("up0"); err != nil || got.Index != up.Index {
			t.Errorf("UplinkByName(up0) with 400 altnames = %+v, %v; the library reads it (index %d)", got, err, up.Index)
		}
	})
}

// The kind of a link whose kernel kind the netlink library names
// otherwise (a tun device, which it calls "tuntap") is what the refusal
// of a holder names: LookupHolder must say what the library says, as
// TestHostKernelReadsEachLinkAsTheNetlinkLibraryDoes holds for the kinds
// it makes (bridge, veth, none).
func TestALinkOfAKindTheLibraryRenamesIsNamedAsTheLibraryNamesIt(t *testing.T) {
	inNetNS(t, func(k *Netlink, up Uplink, dev int) {
		if out, err := exec.Command("ip", "tuntap", "add", "mode", "tun", "name", "t0").CombinedOutput(); err != nil {
			t.Skipf("no tun device here: %v: %s", err, out)
		}
		link, err := k.nl().LinkByName("t0")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := k.LookupHolder("t0"); err != nil || got.Kind != link.Type() {
			t.Errorf("LookupHolder(t0).Kind = %q (%v); the library says %q, which Judge's refusal named before", got.Kind, err, link.Type())
		}
	})
}

// The socket's read gives an answer's whole length (recvfrom with
// MSG_TRUNC), which readAnswer needs to refuse a cut answer: without it
// the read gives the buffer's length and the cut answer is parsed. lo's
// answer is longer than a header and an ifinfomsg.
func TestTheSocketsReadGivesACutAnswersWholeLength(t *testing.T) {
	c, err := openRT()
	if err != nil {
		t.Skipf("cannot open a NETLINK_ROUTE socket here: %v", err)
	}
	defer c.close()
	c.buf = make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("lo")))
	if err := c.execute(req, func(syscall.NetlinkMessage) {}); !errors.Is(err, unix.EMSGSIZE) {
		t.Errorf("lo's answer in a %d-byte buffer gave %v; want EMSGSIZE", len(c.buf), err)
	}
}
