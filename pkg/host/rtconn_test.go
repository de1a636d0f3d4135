package host

import (
	"encoding/binary"
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The tests here drive readAnswer with canned answers, laid out as the
// kernel lays them out, for what a kernel does rarely: a signal during a
// read, an answer larger than the buffer, an interrupted dump.

const ourSeq = 7

var (
	linkRequest = unix.NlMsghdr{Type: unix.RTM_GETLINK, Flags: unix.NLM_F_REQUEST, Seq: ourSeq}
	linkDump    = unix.NlMsghdr{Type: unix.RTM_GETLINK, Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: ourSeq}
)

// nlMsg is one netlink message: its header, data and padding to 4 bytes.
func nlMsg(typ, flags uint16, seq uint32, data []byte) []byte {
	h := unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr + len(data)), Type: typ, Flags: flags, Seq: seq, Pid: 4242}
	b, err := binary.Append(nil, binary.NativeEndian, h)
	if err != nil {
		panic(err)
	}
	b = append(b, data...)
	return append(b, make([]byte, nlmAlign(len(b))-len(b))...)
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// newLink is an RTM_NEWLINK message about the link of index.
func newLink(flags uint16, seq uint32, index int32) []byte {
	ifi := nl.NewIfInfomsg(unix.AF_UNSPEC)
	ifi.Index = index
	return nlMsg(unix.RTM_NEWLINK, flags, seq, ifi.Serialize())
}

// errMsg is an NLMSG_ERROR carrying -errno (0: an acknowledgement) and
// the request's header, as the kernel answers.
func errMsg(seq uint32, errno syscall.Errno) []byte {
	data := binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno)))
	h := linkRequest
	h.Len, h.Seq = unix.SizeofNlMsghdr, seq
	data, _ = binary.Append(data, binary.NativeEndian, h)
	return nlMsg(unix.NLMSG_ERROR, 0, seq, data)
}

// done ends a dump, carrying -errno as the kernel's NLMSG_DONE does.
func done(flags uint16, seq uint32, errno syscall.Errno) []byte {
	return nlMsg(unix.NLMSG_DONE, unix.NLM_F_MULTI|flags, seq, binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno))))
}

// datagram is one read's worth: the messages in one datagram, or err.
type datagram struct {
	b   []byte
	err error
}

func answer(msgs ...[]byte) datagram { return datagram{b: slices.Concat(msgs...)} }

// canned is a receive step that gives its datagrams in order, as
// recvfrom with MSG_TRUNC does: copied up to buf's length, the whole
// length returned. A read past them fails the test: readAnswer went on
// reading after the answer had ended.
type canned struct {
	t     *testing.T
	queue []datagram
	reads int
}

func (k *canned) recv(buf []byte) (int, error) {
	if len(k.queue) == 0 {
		k.t.Fatalf("readAnswer read a datagram past the answer's end (read %d)", k.reads+1)
	}
	d := k.queue[0]
	k.queue, k.reads = k.queue[1:], k.reads+1
	copy(buf, d.b)
	return len(d.b), d.err
}

// readCanned runs readAnswer for req over these datagrams with a buffer of
// size bytes, and gives the indices of the links f was given.
func readCanned(t *testing.T, req unix.NlMsghdr, size int, ds ...datagram) (*canned, []int32, error) {
	t.Helper()
	k := &canned{t: t, queue: ds}
	var got []int32
	err := readAnswer(k.recv, make([]byte, size), req, func(m syscall.NetlinkMessage) {
		if m.Header.Seq != ourSeq || m.Header.Type != unix.RTM_NEWLINK {
			t.Errorf("f was given a message of type %d, seq %d; want only our RTM_NEWLINKs (seq %d)", m.Header.Type, m.Header.Seq, ourSeq)
		}
		got = append(got, nl.DeserializeIfInfomsg(m.Data).Index)
	})
	return k, got, err
}

func TestADumpInMorePartsDeliversEveryMessageUpToDone(t *testing.T) {
	k, got, err := readCanned(t, linkDump, 4096,
		answer(newLink(unix.NLM_F_MULTI, ourSeq, 1), newLink(unix.NLM_F_MULTI, ourSeq, 2)),
		answer(newLink(unix.NLM_F_MULTI, ourSeq, 3)),
		answer(newLink(unix.NLM_F_MULTI, ourSeq, 4), done(0, ourSeq, 0)))
	if err != nil || !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Errorf("a dump of links 1 to 4 in three datagrams gave f %v, %v; want [1 2 3 4], nil", got, err)
	}
	if len(k.queue) != 0 {
		t.Errorf("%d datagrams left unread; the dump ends at NLMSG_DONE", len(k.queue))
	}
}

// An interrupted dump is read to its NLMSG_DONE, every message given to
// f, before it is reported: the socket then holds nothing of it.
func TestAnInterruptedDumpIsReadToItsEndThenReportedAsInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ds        []datagram
		wantLinks []int32
	}{
		{"flag on a message", []datagram{
			answer(newLink(unix.NLM_F_MULTI, ourSeq, 1), newLink(unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, ourSeq, 2)),
			answer(newLink(unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, ourSeq, 3), done(unix.NLM_F_DUMP_INTR, ourSeq, 0)),
		}, []int32{1, 2, 3}},
		{"flag on NLMSG_DONE only", []datagram{
			answer(newLink(unix.NLM_F_MULTI, ourSeq, 1)),
			answer(done(unix.NLM_F_DUMP_INTR, ourSeq, 0)),
		}, []int32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, got, err := readCanned(t, linkDump, 4096, tc.ds...)
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				t.Errorf("an interrupted dump gave %v; want netlink.ErrDumpInterrupted, as the library returns it", err)
			}
			if !slices.Equal(got, tc.wantLinks) || len(k.queue) != 0 {
				t.Errorf("f was given %v with %d datagrams unread; want %v and none: the dump is read to NLMSG_DONE", got, len(k.queue), tc.wantLinks)
			}
		})
	}
}

// An answer cut by the buffer is refused whole, wherever the cut falls:
// syscall.ParseNetlinkMessage stops without an error at a message's end
// or with fewer than a header's bytes left, and would lose the rest.
func TestAnAnswerLongerThanTheBufferIsEMSGSIZE(t *testing.T) {
	two := answer(newLink(unix.NLM_F_MULTI, ourSeq, 1), newLink(unix.NLM_F_MULTI, ourSeq, 2))
	one := len(newLink(0, ourSeq, 1))
	for _, tc := range []struct {
		name string
		size int
	}{
		{"at a message's end", one},
		{"in the next header", one + 8},
		{"in a message's data", one - 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := readCanned(t, linkDump, tc.size, two, answer(done(0, ourSeq, 0)))
			if !errors.Is(err, unix.EMSGSIZE) || len(got) != 0 {
				t.Errorf("an answer of %d bytes in a buffer of %d gave f %v, %v; want none and EMSGSIZE", len(two.b), tc.size, got, err)
			}
		})
	}
}

func TestAReadInterruptedByASignalIsRetried(t *testing.T) {
	_, got, err := readCanned(t, linkRequest, 4096, datagram{err: unix.EINTR}, datagram{err: unix.EINTR}, answer(newLink(0, ourSeq, 5)))
	if err != nil || !slices.Equal(got, []int32{5}) {
		t.Errorf("a read interrupted twice by a signal gave f %v, %v; want [5], nil: EINTR is retried", got, err)
	}
}

func TestAReadsOtherErrorIsReturnedNotRetried(t *testing.T) {
	_, got, err := readCanned(t, linkRequest, 4096, datagram{err: unix.ENOBUFS})
	if !errors.Is(err, unix.ENOBUFS) || len(got) != 0 {
		t.Errorf("a read failing with ENOBUFS gave f %v, %v; want none and ENOBUFS", got, err)
	}
}

func TestAKernelErrorComesBackAsItsErrno(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  unix.NlMsghdr
		ds   []datagram
	}{
		{"a request's", linkRequest, []datagram{answer(errMsg(ourSeq, unix.ENODEV))}},
		{"in a dump", linkDump, []datagram{answer(newLink(unix.NLM_F_MULTI, ourSeq, 1)), answer(errMsg(ourSeq, unix.ENODEV))}},
		{"on a dump's NLMSG_DONE", linkDump, []datagram{answer(newLink(unix.NLM_F_MULTI, ourSeq, 1), done(0, ourSeq, unix.ENODEV))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readCanned(t, tc.req, 4096, tc.ds...)
			if en, ok := err.(syscall.Errno); !ok || en != unix.ENODEV {
				t.Errorf("an answer with errno ENODEV gave %#v (%v); want the bare syscall.Errno ENODEV, as the library returns it", err, err)
			}
		})
	}
}

// An acknowledgement (NLMSG_ERROR with errno 0) ends a request: nothing
// more is read, nothing given to f.
func TestAnAcknowledgementEndsARequest(t *testing.T) {
	k, got, err := readCanned(t, linkRequest, 4096, answer(errMsg(ourSeq, 0)), answer(newLink(0, ourSeq, 9)))
	if err != nil || len(got) != 0 || k.reads != 1 {
		t.Errorf("an acknowledgement gave f %v, %v after %d reads; want none, nil after 1", got, err, k.reads)
	}
}

// What is left on the socket of an earlier request's answer (another
// sequence number) is skipped, its errors and its end included, whether
// in a datagram of its own or before our answer in one.
func TestAnAnswerWithAnotherSequenceNumberIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  unix.NlMsghdr
		ds   []datagram
		want []int32
	}{
		{"a request's", linkRequest, []datagram{
			answer(newLink(0, ourSeq-1, 1)),
			answer(errMsg(ourSeq-1, unix.ENODEV), newLink(0, ourSeq, 2)),
		}, []int32{2}},
		{"a dump's", linkDump, []datagram{
			answer(newLink(unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, ourSeq-1, 1), done(0, ourSeq-1, 0)),
			answer(newLink(unix.NLM_F_MULTI, ourSeq, 2), done(0, ourSeq-1, unix.ENOBUFS)),
			answer(newLink(unix.NLM_F_MULTI, ourSeq, 3), done(0, ourSeq, 0)),
		}, []int32{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := readCanned(t, tc.req, 4096, tc.ds...)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("an answer after an earlier request's (seq %d) gave f %v, %v; want %v, nil", ourSeq-1, got, err, tc.want)
			}
		})
	}
}
