package host

import (
	"encoding/binary"
	"fmt"
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
		// Big enough for a dump's batch (the kernel fills at most 32 KiB);
		// pages the kernel never writes are never touched.
		c.buf = make([]byte, 32<<10)
	}
	dump, intr := req.Flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP, false
	for {
		// MSG_TRUNC: the answer's whole length, to tell a cut one.
		n, _, err := unix.Recvfrom(c.fd, c.buf, unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > len(c.buf) {
			return fmt.Errorf("netlink answer of %d bytes: %w", n, unix.EMSGSIZE)
		}
		msgs, err := syscall.ParseNetlinkMessage(c.buf[:n])
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
