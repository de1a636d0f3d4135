package main

import (
	nlbin "encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kernelProbe adds and removes one address on a node's eip0 straight over
// netlink, from the harness: what the kernel alone takes for the address
// change that every ADD and DEL of a new IP makes, whatever the plugin does.
// It runs inside the interleaved iterations, so the kernel's lists are as
// cold in the caches as they are for the plugin.
type kernelProbe struct {
	fd, index int
	ip        netip.Addr
	add, del  []time.Duration
	err       error
}

func (b *bench) openKernelProbe(n *node, ip string) (*kernelProbe, error) {
	k := &kernelProbe{ip: netip.MustParseAddr(ip)}
	err := n.ns.Do(func(nsNetNS) error {
		ifi, err := net.InterfaceByName("eip0")
		if err != nil {
			return err
		}
		k.index = ifi.Index
		k.fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		return unix.Bind(k.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	if err != nil {
		return nil, fmt.Errorf("kernel probe in %s: %w", n.name, err)
	}
	return k, nil
}

// once times one add and one remove.
func (k *kernelProbe) once(seq uint32, keep bool) {
	if k.err != nil {
		return
	}
	t0 := time.Now()
	if err := addrRequest(k.fd, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, k.index, k.ip, 2*seq+1); err != nil {
		k.err = fmt.Errorf("adding %s to eip0: %w", k.ip, err)
		return
	}
	t1 := time.Now()
	if err := addrRequest(k.fd, unix.RTM_DELADDR, 0, k.index, k.ip, 2*seq+2); err != nil {
		k.err = fmt.Errorf("removing %s from eip0: %w", k.ip, err)
		return
	}
	if keep {
		k.add, k.del = append(k.add, t1.Sub(t0)), append(k.del, time.Since(t1))
	}
}

// addrRequest sends one RTM_NEWADDR or RTM_DELADDR and waits for its ack.
func addrRequest(fd int, typ uint16, flags uint16, index int, ip netip.Addr, seq uint32) error {
	body := addrBody(typ, index, ip)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	nlbin.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	nlbin.NativeEndian.PutUint16(msg[4:], typ)
	nlbin.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	nlbin.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	return waitAck(fd, seq)
}

// addrBody is the ifaddrmsg and attributes of one address, set as the
// plugin sets an IPv6 address: no DAD, no prefix route, never preferred.
func addrBody(typ uint16, index int, ip netip.Addr) []byte {
	family, bits := unix.AF_INET, 32
	if ip.Is6() {
		family, bits = unix.AF_INET6, 128
	}
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0], body[1] = byte(family), byte(bits)
	nlbin.NativeEndian.PutUint32(body[4:], uint32(index))
	addr := ip.AsSlice()
	body = appendAttr(body, unix.IFA_LOCAL, addr)
	body = appendAttr(body, unix.IFA_ADDRESS, addr)
	if ip.Is6() && typ == unix.RTM_NEWADDR {
		fl := make([]byte, 4)
		nlbin.NativeEndian.PutUint32(fl, unix.IFA_F_NODAD|unix.IFA_F_NOPREFIXROUTE)
		body = appendAttr(body, unix.IFA_FLAGS, fl)
		ci := make([]byte, 16) // preferred 0, valid forever
		nlbin.NativeEndian.PutUint32(ci[4:], 0xffffffff)
		body = appendAttr(body, unix.IFA_CACHEINFO, ci)
	}
	return body
}

// waitAck reads until the kernel's answer to seq, an error or success.
func waitAck(fd int, seq uint32) error {
	buf := make([]byte, 4096)
	for {
		nr, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:nr])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if e := int32(nlbin.NativeEndian.Uint32(m.Data)); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
	}
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	h := make([]byte, unix.SizeofRtAttr)
	nlbin.NativeEndian.PutUint16(h[0:], uint16(l))
	nlbin.NativeEndian.PutUint16(h[2:], typ)
	b = append(b, h...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
