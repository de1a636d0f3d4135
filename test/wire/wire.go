// Package wire is test support for the tests that check what reaches the
// wire (pkg/announce and test/netns): a stream of captured frames stamped on
// arrival, and the ICMPv6 checksum to verify the kernel filled in. It sends
// nothing and is imported only by tests.
package wire

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Frame is one frame an interface received, stamped on arrival so that
// tests can check the spacing of announcement rounds.
type Frame struct {
	At   time.Time
	Data []byte
}

// Reader is a capture socket, such as a *packet.Conn.
type Reader interface {
	ReadFrom([]byte) (int, net.Addr, error)
}

// Stream reads c until it fails (the test closes it) and sends each frame.
func Stream(c Reader) <-chan Frame {
	frames := make(chan Frame, 4096)
	go func() {
		defer close(frames)
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			frames <- Frame{At: time.Now(), Data: append([]byte(nil), buf[:n]...)}
		}
	}()
	return frames
}

// ICMPv6Sum is the one's complement sum over the IPv6 pseudo-header
// (RFC 8200 section 8.1) and msg: 0xffff when msg's checksum is right.
func ICMPv6Sum(src, dst netip.Addr, msg []byte) uint16 {
	var b []byte
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	b = append(b, 0, 0, 0, unix.IPPROTO_ICMPV6)
	b = append(b, msg...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}
