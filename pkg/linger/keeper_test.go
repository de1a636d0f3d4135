package linger

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// standIn is a pipe that plays a socket: w goes to the Keeper, and r
// tells whether any copy of w is still open anywhere.
type standIn struct{ r, w *os.File }

func newStandIn(t *testing.T) standIn {
	t.Helper()
	var s standIn
	var err error
	if s.r, s.w, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.r.Close(); s.w.Close() })
	return s
}

// open says whether a copy of the stand-in's socket is still open.
func (s standIn) open(t *testing.T) bool { return !hungUp(t, s.r) }

// hungUp says whether every write end of the pipe whose read end is r is
// closed.
func hungUp(t *testing.T, r *os.File) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n < 0 {
		t.Fatalf("poll: %v", err)
	}
	return fds[0].Revents&unix.POLLHUP != 0
}

// children records the children a Keeper starts, holding their files
// open as a child would, until the test ends; fail fails the next start.
type children struct {
	t    *testing.T
	got  [][]*os.File
	fail error
}

func (c *children) start(files []*os.File) error {
	if err := c.fail; err != nil {
		c.fail = nil
		closeAll(files)
		return err
	}
	c.got = append(c.got, files)
	c.t.Cleanup(func() { closeAll(files) })
	return nil
}

// A netfilter socket is kept as a packet socket is, whatever its process
// committed: its release waits for any destroy worker pending in the
// namespace, a DEL's that ran just before included.
func TestEverySocketIsClosedOnlyAfterTheExit(t *testing.T) {
	ch := &children{t: t}
	k := New(Options{Hold: ch.start})
	packet, netfilter := newStandIn(t), newStandIn(t)
	k.Keep(packet.w, Packet)
	k.Keep(netfilter.w, Netfilter)
	if !packet.open(t) || !netfilter.open(t) {
		t.Error("a socket was closed before Done")
	}
	if err := k.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if len(ch.got) != 1 || len(ch.got[0]) != 3 {
		t.Fatalf("children %v, want one holding the hold pipe and both sockets", ch.got)
	}
	if ch.got[0][1] != packet.w || ch.got[0][2] != netfilter.w {
		t.Errorf("the holding child got %v, want both sockets after its hold pipe", ch.got[0])
	}
	if !packet.open(t) || !netfilter.open(t) {
		t.Error("no copy of a socket is left: the plugin's close was the last")
	}
	if !hungUp(t, ch.got[0][0]) {
		t.Error("the holding child's pipe is still open after Done: it would never close its sockets")
	}
}

func TestDoneParksWhatNoChildTookAndStartsNoChild(t *testing.T) {
	ch := &children{t: t}
	var parked [][]*os.File
	park := func(files []*os.File) error {
		parked = append(parked, files)
		t.Cleanup(func() { closeAll(files) })
		return nil
	}
	k := New(Options{Park: park, Hold: ch.start})
	k.Keep(newStandIn(t).w, Packet)
	k.Keep(newStandIn(t).w, Netfilter)
	if err := k.Done(); err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || len(parked[0]) != 2 || len(ch.got) != 0 {
		t.Errorf("parked %v and started %d children, want both files parked at once and no child", parked, len(ch.got))
	}
}

func TestWhatCannotBeParkedGoesToAHoldingChild(t *testing.T) {
	ch := &children{t: t}
	park := func([]*os.File) error { return errors.New("io_uring_setup: operation not permitted") }
	k := New(Options{Park: park, Hold: ch.start})
	sock := newStandIn(t)
	k.Keep(sock.w, Packet)
	if err := k.Done(); err != nil {
		t.Fatal(err)
	}
	if len(ch.got) != 1 || len(ch.got[0]) != 2 || !sock.open(t) {
		t.Errorf("children %v, want one holding the pipe and the socket, still open", ch.got)
	}
}

// Board gives an announcing child all that is kept, and keeps it when
// that start fails, for the next child.
func TestBoardHandsEverythingKeptToTheNextChildThatStarts(t *testing.T) {
	ch := &children{t: t, fail: errors.New("fork: resource temporarily unavailable")}
	k := New(Options{Hold: ch.start})
	a := newStandIn(t)
	k.Keep(a.w, Packet)
	if err := k.Board(ch.start); err == nil {
		t.Fatal("Board hid the failed start")
	}
	if !a.open(t) {
		t.Fatal("a failed start lost the kept socket")
	}
	k.Keep(newStandIn(t).w, Packet)
	if err := k.Board(ch.start); err != nil {
		t.Fatal(err)
	}
	if len(ch.got) != 1 || len(ch.got[0]) != 3 {
		t.Fatalf("children %v, want one with the hold pipe and both sockets", ch.got)
	}
	if hungUp(t, ch.got[0][0]) {
		t.Error("the child was told to go before Done")
	}
	if err := k.Done(); err != nil {
		t.Fatal(err)
	}
	if len(ch.got) != 1 || !hungUp(t, ch.got[0][0]) || !a.open(t) {
		t.Errorf("after Done: %d children, want still 1; its pipe must be closed and the socket still held", len(ch.got))
	}
}

func TestBoardingWithNothingKeptGivesTheChildNoPipe(t *testing.T) {
	ch := &children{t: t}
	k := New(Options{Hold: ch.start})
	if err := k.Board(ch.start); err != nil {
		t.Fatal(err)
	}
	if len(ch.got) != 1 || len(ch.got[0]) != 0 {
		t.Errorf("children %v, want one with no files", ch.got)
	}
}

// The debug log says what was kept past the exit and by what.
func TestDoneLogsWhatItKeptAndHow(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	park := func(files []*os.File) error { t.Cleanup(func() { closeAll(files) }); return nil }
	k := New(Options{Park: park, Log: log})
	k.Keep(newStandIn(t).w, Packet)
	k.Keep(newStandIn(t).w, Netfilter)
	if err := k.Done(); err != nil {
		t.Fatal(err)
	}
	if want := `sockets="packet socket, netfilter socket" by="a parked ring"`; !strings.Contains(buf.String(), want) {
		t.Errorf("log %q lacks %q", buf.String(), want)
	}
}

// A sink takes the netfilter sockets, before a child or the park could:
// the packet sockets go on as before. One that refuses leaves them all to
// the other ways.
func TestTheSinkTakesTheNetfilterSocketsFirst(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		ch := &children{t: t}
		var sunk [][]*os.File
		k := New(Options{Hold: ch.start, Sink: func(files []*os.File) error {
			if refuse {
				return errors.New("no sink")
			}
			sunk = append(sunk, files)
			t.Cleanup(func() { closeAll(files) })
			return nil
		}})
		packet, netfilter := newStandIn(t), newStandIn(t)
		k.Keep(packet.w, Packet)
		k.Keep(netfilter.w, Netfilter)
		if err := k.Done(); err != nil {
			t.Fatalf("Done: %v", err)
		}
		switch {
		case refuse && (len(sunk) != 0 || len(ch.got) != 1 || len(ch.got[0]) != 3):
			t.Fatalf("refused: sink %v, children %v, want the child to hold both", sunk, ch.got)
		case !refuse && (len(sunk) != 1 || len(sunk[0]) != 1 || sunk[0][0] != netfilter.w):
			t.Fatalf("the sink took %v, want the netfilter socket alone", sunk)
		case !refuse && (len(ch.got) != 1 || len(ch.got[0]) != 2 || ch.got[0][1] != packet.w):
			t.Fatalf("children %v, want one holding the hold pipe and the packet socket", ch.got)
		}
		if !packet.open(t) || !netfilter.open(t) {
			t.Error("a socket was closed in the process")
		}
	}
}

// Board, too, gives the sink the netfilter sockets first: the announcer
// it starts gets the rest.
func TestBoardGivesTheSinkTheNetfilterSocketsFirst(t *testing.T) {
	ch := &children{t: t}
	var sunk []*os.File
	k := New(Options{Sink: func(files []*os.File) error {
		sunk = append(sunk, files...)
		t.Cleanup(func() { closeAll(files) })
		return nil
	}})
	packet, netfilter := newStandIn(t), newStandIn(t)
	k.Keep(packet.w, Packet)
	k.Keep(netfilter.w, Netfilter)
	if err := k.Board(ch.start); err != nil {
		t.Fatalf("Board: %v", err)
	}
	if len(sunk) != 1 || sunk[0] != netfilter.w {
		t.Fatalf("the sink took %v, want the netfilter socket alone", sunk)
	}
	if len(ch.got) != 1 || len(ch.got[0]) != 2 {
		t.Fatalf("children %v, want the announcer with the hold pipe and the packet socket", ch.got)
	}
	if err := k.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if !packet.open(t) || !netfilter.open(t) {
		t.Error("a socket was closed in the process")
	}
}
