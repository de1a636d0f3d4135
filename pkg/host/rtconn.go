package host

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// rtConn is a blocking rtnetlink socket of this package's own, kept for
// the invocation, for the requests the netlink library cannot send (a
// bridge's ports, one proxy entry), which its per-request sockets made a
// socket each. The library's sockets are non-blocking and registered with
// the runtime's poller: one takes eight calls to open and close (socket,
// three fcntl, epoll_ctl, bind, epoll_ctl, close) where this takes two to
// open, each request asks the socket's address again (getsockname), and
// each answer wakes the poller's idle thread on the other core. A
// blocking socket the poller never sees has none of that: a request is
// one sendto and its recvfroms.
//
// With the lean link reading (getLink) and the sysctl reads (sysctl),
// moving the holder's and uplink's lookups, the ports and the proxy entry
// here cut a steered IPv4 ADD's CPU by 0.16 ms (95% CI 0.10 to 0.23) and
// its DEL's by 0.19 ms (0.13 to 0.26), paired against the library's
// sockets (test/bench -ab, 100 pairs, exec floor 1.87 ms). The changes an
// ADD and a DEL make (address, route, proxy entry) stay with the library:
// moving them here too showed no CPU change beyond the bench's noise.
type rtConn struct {
	mu  sync.Mutex
	fd  int
	buf []byte
}

func openRT() (*rtConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a netlink socket: %w", err)
	}
	return &rtConn{fd: fd}, nil
}

func (c *rtConn) close() { unix.Close(c.fd) }

// execute sends req and gives each answer's message to f: one for a
// request, each up to NLMSG_DONE for a dump. A kernel error comes back as
// its errno, an interrupted dump as netlink.ErrDumpInterrupted, as the
// library returns them.
func (c *rtConn) execute(req *nl.NetlinkRequest, f func(m syscall.NetlinkMessage)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := unix.Sendto(c.fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if c.buf == nil {
		// The netlink library's size: a dump's batch is at most 32 KiB,
		// but one link's answer can be larger (hundreds of altnames), and
		// what the library reads must be read here. Pages the kernel never
		// writes are never touched.
		c.buf = make([]byte, 64<<10)
	}
	return readAnswer(c.recv, c.buf, req.NlMsghdr, f)
}

// recv reads one datagram of an answer into buf. MSG_TRUNC: n is the
// answer's whole length, to tell a cut one.
func (c *rtConn) recv(buf []byte) (n int, err error) {
	n, _, err = unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
	return n, err
}

// readAnswer reads the answer to the request whose header is req, a
// datagram at a time from recv into buf, as execute describes. recv
// returns a datagram's whole length, as recvfrom with MSG_TRUNC does. It
// is an argument so that a test can give the answers a kernel gives
// rarely: a signal's EINTR, a cut answer, an interrupted dump.
func readAnswer(recv func(buf []byte) (n int, err error), buf []byte, req unix.NlMsghdr, f func(m syscall.NetlinkMessage)) error {
	dump, intr := req.Flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP, false
	for {
		n, err := recv(buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > len(buf) {
			return fmt.Errorf("netlink answer of %d bytes: %w", n, unix.EMSGSIZE)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq {
				continue // the rest of an earlier request's answer
			}
			intr = intr || m.Header.Flags&unix.NLM_F_DUMP_INTR != 0
			if m.Header.Type == unix.NLMSG_ERROR || m.Header.Type == unix.NLMSG_DONE {
				if err := nlErrno(m.Data); err != nil {
					return err
				}
				if intr {
					return netlink.ErrDumpInterrupted
				}
				return nil
			}
			f(m)
			if !dump {
				return nil
			}
		}
	}
}

// nlErrno is the error an NLMSG_ERROR or NLMSG_DONE carries, nil for 0
// (an acknowledgement, a dump's end).
func nlErrno(data []byte) error {
	if len(data) < 4 {
		return nil
	}
	if e := int32(binary.NativeEndian.Uint32(data)); e < 0 {
		return syscall.Errno(-e)
	}
	return nil
}

// linkMsg is what this package reads of a link: what the holder's and an
// uplink's checks use (Link, Uplink).
type linkMsg struct {
	index int
	flags uint32
	name  string
	// kind is the kernel's (IFLA_INFO_KIND), "device" for a link with
	// none (a physical one, lo), as the netlink library names it.
	kind  string
	alias string
	mac   net.HardwareAddr
	oper  uint8
}

// rtextFilterSkipStats asks the kernel to leave a link's statistics out
// of its answer (RTEXT_FILTER_SKIP_STATS, include/uapi/linux/rtnetlink.h).
const rtextFilterSkipStats = 1 << 3

// getLink asks for the link called name, or of index when name is "",
// ErrNoLink when there is none. The netlink library's LinkByName and
// LinkByIndex read every attribute of the answer into a Link (its
// statistics, every per-family setting): 0.042 ms of a steered ADD's CPU
// for the holder and the uplink (perf, 300 steered IPv4 ADDs, exec floor
// 1.5 ms). This asks the kernel to leave the statistics out and reads the
// six attributes that are used, on the package's own socket (rtConn; the
// figure there is of both).
func (k *Netlink) getLink(name string, index int) (linkMsg, error) {
	c, err := k.rt()
	if err != nil {
		return linkMsg{}, err
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	ifi := nl.NewIfInfomsg(unix.AF_UNSPEC)
	ifi.Index = int32(index)
	req.AddData(ifi)
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(rtextFilterSkipStats)))
	if name != "" {
		typ := unix.IFLA_IFNAME
		if len(name) > unix.IFNAMSIZ-1 {
			typ = unix.IFLA_ALT_IFNAME
		}
		req.AddData(nl.NewRtAttr(typ, nl.ZeroTerminated(name)))
	}
	var l linkMsg
	found, perr := false, error(nil)
	err = c.execute(req, func(m syscall.NetlinkMessage) {
		if m.Header.Type == unix.RTM_NEWLINK {
			l, perr = parseLink(m.Data)
			found = perr == nil
		}
	})
	switch {
	case errors.Is(err, unix.ENODEV), err == nil && perr == nil && !found:
		return linkMsg{}, ErrNoLink
	case err != nil:
		return linkMsg{}, err
	}
	return l, perr
}

// parseLink reads an RTM_NEWLINK message's data. Its attribute values
// point into the socket's buffer: what is kept is copied.
func parseLink(b []byte) (linkMsg, error) {
	if len(b) < unix.SizeofIfInfomsg {
		return linkMsg{}, fmt.Errorf("short link message of %d bytes", len(b))
	}
	ifi := nl.DeserializeIfInfomsg(b)
	attrs, err := nl.ParseRouteAttr(b[unix.SizeofIfInfomsg:])
	if err != nil {
		return linkMsg{}, err
	}
	l := linkMsg{index: int(ifi.Index), flags: ifi.Flags, kind: "device"}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.IFLA_IFNAME:
			l.name = cString(a.Value)
		case unix.IFLA_IFALIAS:
			l.alias = cString(a.Value)
		case unix.IFLA_ADDRESS:
			// All zeros (lo's) is none, as the library reads it.
			if slices.ContainsFunc(a.Value, func(b byte) bool { return b != 0 }) {
				l.mac = slices.Clone(net.HardwareAddr(a.Value))
			}
		case unix.IFLA_OPERSTATE:
			if len(a.Value) > 0 {
				l.oper = a.Value[0]
			}
		case unix.IFLA_LINKINFO:
			infos, err := nl.ParseRouteAttr(a.Value)
			if err != nil {
				return linkMsg{}, err
			}
			for _, i := range infos {
				if i.Attr.Type&nl.NLA_TYPE_MASK == unix.IFLA_INFO_KIND {
					l.kind = libraryKind(cString(i.Value))
				}
			}
		}
	}
	return l, nil
}

// libraryKind is the kernel's kind of link as the netlink library names
// it (its Link's Type), which a refusal quotes: the one it renames is a
// tun or tap device's, "tun" to the kernel and "tuntap" to the library.
func libraryKind(kind string) string {
	if kind == "tun" {
		return "tuntap"
	}
	return kind
}

// cString is a NUL-terminated attribute's string.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
