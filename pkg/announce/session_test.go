package announce

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/linger"
)

var (
	eth0 = Uplink{Name: "eth0", Index: 2, MAC: testMAC}
	eth1 = Uplink{Name: "eth1", Index: 3, MAC: testMAC, Router: true}
	v4b  = netip.MustParseAddr("198.51.100.8")
	v6b  = netip.MustParseAddr("2001:db8::8")
)

// started is one child a Session asked to start.
type started struct {
	plan  Plan
	files []*os.File
}

// starts records the children a Session starts instead of starting them,
// and keeps their files open, as a child would, until the test ends.
type starts struct {
	t    *testing.T
	mu   sync.Mutex
	got  []started
	fail error // the next start fails with it, once
}

func (s *starts) start(p Plan, files []*os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fail; err != nil {
		s.fail = nil
		closeAll(files)
		return err
	}
	s.got = append(s.got, started{p, files})
	s.t.Cleanup(func() { closeAll(files) })
	return nil
}

func newTestSession(t *testing.T, rounds int) (*Session, *fakeNet, *starts) {
	n, st := newFakeNet(t), &starts{t: t}
	owner := &Owner{DataDir: "/run/x", Device: "eip0", Network: "pods", ContainerID: "c1", IfName: "eth0"}
	s := NewSession(SessionOptions{Rounds: rounds, Interval: time.Second, Owner: owner, Sockets: n.sockets(), Start: st.start})
	return s, n, st
}

// hungUp says whether every write end of the pipe whose read end is f is
// closed: what the child waits for before it may close its sockets.
func hungUp(t *testing.T, f *os.File) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 0); err != nil {
		t.Fatal(err)
	}
	return fds[0].Revents&unix.POLLHUP != 0
}

func TestSessionHandsLaterRoundsToOneChildPerUplinkAndTheProbesToTheFirst(t *testing.T) {
	s, n, st := newTestSession(t, 3)
	for _, tg := range []Target{{testIP4, eth0}, {v4b, eth1}} {
		if err := s.Probe(tg, time.Millisecond); err != nil {
			t.Fatalf("Probe(%s): %v", tg.Addr, err)
		}
	}
	if err := s.Announce([]Target{{testIP4, eth0}, {v4b, eth1}, {testIP6, eth0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if len(st.got) != 2 {
		t.Fatalf("started %d children, want one per uplink (2)", len(st.got))
	}
	first, second := st.got[0], st.got[1]
	if first.plan.Uplink.Name != "eth0" || !slices.Equal(first.plan.IPs, []netip.Addr{testIP4, testIP6}) ||
		second.plan.Uplink.Name != "eth1" || !slices.Equal(second.plan.IPs, []netip.Addr{v4b}) {
		t.Errorf("plans %s %v and %s %v, want eth0 [%s %s] and eth1 [%s]", first.plan.Uplink.Name, first.plan.IPs,
			second.plan.Uplink.Name, second.plan.IPs, testIP4, testIP6, v4b)
	}
	for _, c := range st.got {
		if c.plan.Rounds != 2 || c.plan.Interval != time.Second || c.plan.Owner == nil || c.plan.Owner.ContainerID != "c1" || !c.plan.Hold {
			t.Errorf("plan for %s is %+v, want the 2 later rounds 1s apart, the owner and a hold pipe", c.plan.Uplink.Name, c.plan)
		}
	}
	// The hold pipe, the ARP socket, then (first child only) both probes'.
	if len(first.files) != 4 || len(second.files) != 2 {
		t.Errorf("children inherit %d and %d files, want 4 (pipe, ARP, 2 probes) and 2 (pipe, ARP)", len(first.files), len(second.files))
	}
	for _, c := range n.conns {
		if !c.isClosed() {
			t.Errorf("the session's own %s socket is still open after Finish", c.kind)
		}
	}
	for _, c := range st.got {
		if !hungUp(t, c.files[0]) {
			t.Errorf("the hold pipe of the child on %s is still open: it would never close its sockets", c.plan.Uplink.Name)
		}
	}
}

func TestSessionSignalsTheChildOnlyOnceItsOwnCopiesAreClosed(t *testing.T) {
	s, n, st := newTestSession(t, 1)
	if err := s.Probe(Target{testIP4, eth0}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var early []string
	n.of("probe")[0].onClose = func() {
		if len(st.got) > 0 && hungUp(t, st.got[0].files[0]) {
			early = append(early, "probe")
		}
	}
	if err := s.Announce([]Target{{testIP4, eth0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil {
		t.Fatal(err)
	}
	if len(st.got) != 1 || st.got[0].plan.Rounds != 0 {
		t.Fatalf("started %+v, want one child with no rounds left to hold the ARP and probe sockets", st.got)
	}
	if len(early) > 0 {
		t.Errorf("the child was told to go before the session closed its %v socket: the plugin's close would be the last", early)
	}
	if !hungUp(t, st.got[0].files[0]) {
		t.Error("the hold pipe is still open after Finish")
	}
}

func TestSessionStartsAChildOnlyToHoldTheProbesWhenNothingElseNeedsOne(t *testing.T) {
	s, _, st := newTestSession(t, 1) // one round, IPv6: no child to announce
	if err := s.Probe(Target{testIP6, eth0}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce([]Target{{testIP6, eth0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil {
		t.Fatal(err)
	}
	if len(st.got) != 1 {
		t.Fatalf("started %d children, want 1 to hold the probe socket", len(st.got))
	}
	c := st.got[0]
	if c.plan.Rounds != 0 || len(c.plan.IPs) != 0 || !c.plan.Hold || len(c.files) != 2 {
		t.Errorf("holding child: plan %+v with %d files, want no rounds, no IPs, the hold pipe and the probe", c.plan, len(c.files))
	}
}

func TestSessionWithNothingToHandOverStartsNoChild(t *testing.T) {
	s, _, st := newTestSession(t, 1)
	if err := s.Announce([]Target{{testIP6, eth0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil || len(st.got) != 0 {
		t.Errorf("Finish = %v after starting %d children, want none: one IPv6 round, no probe", err, len(st.got))
	}
}

func TestSessionAfterAFailedAddStartsNothingAndClosesEverything(t *testing.T) {
	s, n, st := newTestSession(t, 3)
	s.Probe(Target{testIP4, eth0}, time.Millisecond)
	s.Announce([]Target{{testIP4, eth0}, {testIP6, eth0}})
	if err := s.Finish(false); err != nil {
		t.Fatal(err)
	}
	if len(st.got) != 0 {
		t.Errorf("a failed ADD started %d children", len(st.got))
	}
	for _, c := range n.conns {
		if !c.isClosed() {
			t.Errorf("a failed ADD left its %s socket open", c.kind)
		}
	}
}

func TestSessionGivesTheProbesToTheNextChildWhenAStartFails(t *testing.T) {
	s, _, st := newTestSession(t, 2)
	s.Probe(Target{testIP4, eth0}, time.Millisecond)
	s.Announce([]Target{{testIP4, eth0}, {v4b, eth1}})
	st.fail = errors.New("fork: resource temporarily unavailable")
	err := s.Finish(true)
	if err == nil || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("Finish = %v, want the failed start on eth0 reported", err)
	}
	// eth0's ARP socket, which its child could not take, goes along too.
	if len(st.got) != 1 || st.got[0].plan.Uplink.Name != "eth1" || len(st.got[0].files) != 4 {
		t.Fatalf("started %+v, want eth1's child with the pipe, the probe and both ARP sockets", st.got)
	}
}

func TestSessionNamesAConflictAndAFailedProbeByKind(t *testing.T) {
	s, n, _ := newTestSession(t, 1)
	n.answers = [][]byte{arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, netip.IPv4Unspecified())}
	err := s.Probe(Target{testIP4, eth0}, time.Millisecond)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), otherMAC.String()) || !strings.HasPrefix(err.Error(), testIP4.String()+": ") {
		t.Errorf("probe answered by %s = %v, want ErrConflict naming the IP first and the MAC", otherMAC, err)
	}
	n.fail["probe"] = unix.EPERM
	err = s.Probe(Target{v4b, eth0}, time.Millisecond)
	if !errors.Is(err, ErrAnnounce) || !errors.Is(err, unix.EPERM) || strings.Contains(err.Error(), "announce error") {
		t.Errorf("probe that cannot open = %v, want ErrAnnounce wrapping EPERM, the kind's text not repeated", err)
	}
}

// TestAProbeHeardAloneRefusesOnlyWhereTheNetworkDoesNotStandBy: another
// host probing for the IP while this node does is an RFC 5227 conflict,
// refused, saying so; on a network that stands by there is no holder to
// stand by for (a moved pod's old node saying goodbye, say), and the IP
// is taken at once.
func TestAProbeHeardAloneRefusesOnlyWhereTheNetworkDoesNotStandBy(t *testing.T) {
	for _, standsBy := range []bool{false, true} {
		s, n, _ := newTestSession(t, 1)
		s.o.StandsBy = standsBy
		n.answers = [][]byte{arpFrameOf(t, arp.OperationRequest, otherMAC, netip.IPv4Unspecified(), make(net.HardwareAddr, 6), testIP4)}
		err := s.Probe(Target{testIP4, eth0}, time.Millisecond)
		var who *Answered
		switch {
		case standsBy && err != nil:
			t.Errorf("standing by: probe that heard only another's probe = %v, want nil", err)
		case !standsBy && (!errors.Is(err, ErrConflict) || !errors.As(err, &who) || !who.Probing ||
			!strings.Contains(err.Error(), "another host ("+otherMAC.String()+") probed for it on eth0 while this node did")):
			t.Errorf("probe that heard only another's probe = %v, want ErrConflict saying that host probed too", err)
		}
	}
}

func TestConflictRefusalSaysWhetherThisNodeHoldsTheAddressAndWhatToDo(t *testing.T) {
	for _, c := range []struct {
		name        string
		held, known bool
		hook        bool
		notHeld     bool
	}{
		{name: "state shows it is not held here", hook: true, known: true, notHeld: true},
		{name: "state shows it is held here", hook: true, known: true, held: true},
		{name: "state unknown", hook: true},
		{name: "no state to ask"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, n, _ := newTestSession(t, 1)
			var asked []netip.Addr
			if c.hook {
				s.o.HeldHere = func(ip netip.Addr) (bool, bool) { asked = append(asked, ip); return c.held, c.known }
			}
			n.answers = [][]byte{arpFrameOf(t, arp.OperationReply, otherMAC, testIP4, testMAC, netip.IPv4Unspecified())}
			err := s.Probe(Target{testIP4, eth0}, time.Millisecond)
			msg := err.Error()
			want := testIP4.String() + ": another host (" + otherMAC.String() + ") answered the conflict probe on eth0"
			if !errors.Is(err, ErrConflict) || !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, ": release it on that host, then retry") {
				t.Errorf("refusal %q: want ErrConflict, starting %q and ending with what to do", msg, want)
			}
			if got := strings.Contains(msg, "this node does not hold it"); got != c.notHeld {
				t.Errorf("refusal %q says the node does not hold it: %v, want %v", msg, got, c.notHeld)
			}
			if msg != strings.ToLower(msg) || strings.Contains(msg, "\n") {
				t.Errorf("refusal %q is not one lowercase line", msg)
			}
			if c.hook && !slices.Equal(asked, []netip.Addr{testIP4}) {
				t.Errorf("HeldHere asked about %v, want %s once", asked, testIP4)
			}
		})
	}
}

func TestAFreeAddressDoesNotAskWhetherThisNodeHoldsIt(t *testing.T) {
	s, _, _ := newTestSession(t, 1)
	s.o.HeldHere = func(ip netip.Addr) (bool, bool) {
		t.Errorf("HeldHere(%s) asked with no conflict", ip)
		return false, false
	}
	if err := s.Probe(Target{testIP4, eth0}, time.Millisecond); err != nil {
		t.Fatalf("Probe of a free address: %v", err)
	}
}

func TestSessionAnnouncesFirstRoundsPerUplinkAndStopsAtAFailure(t *testing.T) {
	s, n, _ := newTestSession(t, 1)
	n.fail["arp"] = unix.ENETDOWN
	err := s.Announce([]Target{{testIP4, eth0}, {v4b, eth1}})
	if !errors.Is(err, ErrAnnounce) || !errors.Is(err, unix.ENETDOWN) || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("Announce = %v, want ErrAnnounce naming eth0", err)
	}
	if got := len(s.senders); got != 1 {
		t.Errorf("%d uplinks tried, want the first only", got)
	}
}

func TestTargetsAreGroupedByUplinkInOrder(t *testing.T) {
	groups := byUplink([]Target{{testIP4, eth0}, {v4b, eth1}, {testIP6, eth0}})
	if len(groups) != 2 {
		t.Fatalf("got %d groups, want one per uplink (2)", len(groups))
	}
	if groups[0].up.Name != "eth0" || !slices.Equal(groups[0].ips, []netip.Addr{testIP4, testIP6}) {
		t.Errorf("first group %s %v, want eth0 [%s %s]", groups[0].up.Name, groups[0].ips, testIP4, testIP6)
	}
	if !groups[1].up.Router || groups[1].up.Index != 3 {
		t.Errorf("second group lost the uplink's fields: %+v", groups[1].up)
	}
}

func TestRoundWritesBothGratuitousARPFramesPerIPv4AndOneNAPerIPv6(t *testing.T) {
	n := newFakeNet(t)
	s := NewSenderOn(eth1, n.sockets())
	if err := s.Round([]netip.Addr{testIP4, testIP6, v4b}); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, ip := range []netip.Addr{testIP4, v4b} {
		f, _ := GratuitousARP(eth1.MAC, ip)
		want = append(want, f[0], f[1])
	}
	if got := n.of("arp")[0].written; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("ARP socket got %d frames, want the request and reply of each IPv4 address (%d)", len(got), len(want))
	}
	na, _ := UnsolicitedNA(eth1.MAC, testIP6, true)
	if got := n.of("na")[0].written; len(got) != 1 || !bytes.Equal(got[0], na) {
		t.Errorf("ICMPv6 socket got % x, want one NA with the Router flag of the uplink", got)
	}
}

func TestSenderOpensEachSocketOnFirstNeedAndKeepsIt(t *testing.T) {
	n := newFakeNet(t)
	s := NewSenderOn(eth0, n.sockets())
	s.Round([]netip.Addr{testIP4})
	if len(n.of("na")) != 0 || len(n.of("arp")) != 1 {
		t.Errorf("an IPv4-only round opened %d ARP and %d ICMPv6 sockets, want 1 and 0", len(n.of("arp")), len(n.of("na")))
	}
	s.Round([]netip.Addr{testIP6})
	s.Round([]netip.Addr{testIP4, testIP6})
	if len(n.of("na")) != 1 || len(n.of("arp")) != 1 {
		t.Errorf("later rounds opened new sockets instead of reusing them: %d ARP, %d ICMPv6", len(n.of("arp")), len(n.of("na")))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.conns {
		if !c.isClosed() {
			t.Errorf("Close left the %s socket open", c.kind)
		}
	}
}

func TestAFailedFamilyDoesNotStopTheOtherFamilysPartOfARound(t *testing.T) {
	n := newFakeNet(t)
	n.fail["arp"] = unix.ENETDOWN
	s := NewSenderOn(eth0, n.sockets())
	err := s.Round([]netip.Addr{testIP4, testIP6})
	if !errors.Is(err, unix.ENETDOWN) {
		t.Errorf("Round = %v, want the ARP socket's ENETDOWN", err)
	}
	if got := len(n.of("na")[0].written); got != 1 {
		t.Errorf("the NA part sent %d messages, want 1 despite the ARP failure", got)
	}
}

func TestRunnerSendsOnlyWhatIsStillHeldAndEndsWhenNothingIs(t *testing.T) {
	n := newFakeNet(t)
	held := [][]netip.Addr{{testIP4, v4b}, {v4b}, nil}
	var asked [][]netip.Addr
	var reported []int
	r := Runner{
		Sockets: n.sockets(),
		WhileHeld: func(ips []netip.Addr, send func([]netip.Addr) error) error {
			asked = append(asked, ips)
			h := held[len(asked)-1]
			if len(h) == 0 {
				return nil
			}
			return send(h)
		},
		Report: func(round int, err error) { reported = append(reported, round) },
	}
	p := Plan{Uplink: eth0, IPs: []netip.Addr{testIP4, v4b}, Rounds: 10, Interval: time.Millisecond}
	if err := r.Run(p); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 3 || !slices.Equal(reported, []int{2, 3}) {
		t.Errorf("asked %d times, reported rounds %v; want 3 asks and rounds [2 3], then the end once nothing is held", len(asked), reported)
	}
	if got := len(n.of("arp")[0].written); got != 2*3 {
		t.Errorf("sent %d ARP frames, want 6: two IPs, then one", got)
	}
}

func TestRunnerWaitsForTheHoldPipeToCloseBeforeItEnds(t *testing.T) {
	rd, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{Sockets: newFakeNet(t).sockets(), hold: rd}
	done := make(chan error, 1)
	go func() { done <- r.Run(Plan{Uplink: eth0, Hold: true}) }()
	select {
	case <-done:
		t.Fatal("a holding child ended while the plugin still had its copies open")
	case <-time.After(50 * time.Millisecond):
	}
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holding child did not end within 10s of the pipe's close")
	}
}

var _ = net.HardwareAddr{}

// parks records what a Session parks, keeping the files open as the kernel
// would, or refuses with fail.
type parks struct {
	t     *testing.T
	calls [][]*os.File
	fail  error
}

func (p *parks) park(files []*os.File) error {
	p.calls = append(p.calls, files)
	if p.fail != nil {
		return p.fail
	}
	p.t.Cleanup(func() { closeAll(files) })
	return nil
}

// newParkingSession is a session with the plugin's kind of keeper: one
// that parks, and else starts a holding child as st.
func newParkingSession(t *testing.T, rounds int, fail error) (*Session, *starts, *parks) {
	n, st, pk := newFakeNet(t), &starts{t: t}, &parks{t: t, fail: fail}
	hold := func(files []*os.File) error { return st.start(Plan{Hold: true}, files) }
	k := linger.New(linger.Options{Park: pk.park, Hold: hold})
	s := NewSession(SessionOptions{Rounds: rounds, Interval: time.Second, Owner: &Owner{ContainerID: "c1"},
		Sockets: n.sockets(), Start: st.start, Keeper: k})
	return s, st, pk
}

// probeAndAnnounce probes and announces one IPv4 and one IPv6 IP on eth0
// and an IPv4 one on eth1, then finishes a successful ADD and its keeper.
func probeAndAnnounce(t *testing.T, s *Session) {
	t.Helper()
	targets := []Target{{testIP4, eth0}, {testIP6, eth0}, {v4b, eth1}}
	for _, tg := range targets {
		if err := s.Probe(tg, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Announce(targets); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if err := s.keep.Done(); err != nil {
		t.Fatalf("the keeper's Done: %v", err)
	}
}

func TestSessionParksWhatNoAnnouncingChildTakesAndStartsNoChild(t *testing.T) {
	s, st, pk := newParkingSession(t, 1, nil)
	probeAndAnnounce(t, s)
	if len(st.got) != 0 {
		t.Errorf("started %d children, want none: one round, and parking worked", len(st.got))
	}
	if len(pk.calls) != 1 || len(pk.calls[0]) != 5 {
		t.Fatalf("parked %v, want one call with both ARP sockets and the 3 probes'", pk.calls)
	}
}

func TestSessionWithRoundsLeftGivesEverythingToTheAnnouncingChildren(t *testing.T) {
	s, st, pk := newParkingSession(t, 2, nil)
	probeAndAnnounce(t, s)
	if len(pk.calls) != 0 {
		t.Errorf("parked %v, want nothing: the announcing children hold every socket", pk.calls)
	}
	if len(st.got) != 2 || len(st.got[0].files) != 5 || len(st.got[1].files) != 2 {
		t.Errorf("started %v, want eth0's child with the pipe, its ARP socket and 3 probes, and eth1's with the pipe and its ARP socket", st.got)
	}
}

func TestSessionGivesWhatItCouldNotParkToOneHoldingChild(t *testing.T) {
	s, st, pk := newParkingSession(t, 1, errors.New("io_uring_setup: operation not permitted"))
	probeAndAnnounce(t, s)
	if len(pk.calls) != 1 {
		t.Errorf("tried to park %d times, want once", len(pk.calls))
	}
	if len(st.got) != 1 || st.got[0].plan.Rounds != 0 || !st.got[0].plan.Hold || len(st.got[0].files) != 6 {
		t.Fatalf("started %v, want one child with no rounds, holding the pipe, 2 ARP sockets and 3 probes", st.got)
	}
	if !hungUp(t, st.got[0].files[0]) {
		t.Error("the holding child's pipe is still open after Finish")
	}
}

// announce.count 0: no round is sent and no announcing child started, and
// the probe's socket is still kept past the plugin's exit (parked here),
// as with rounds.
func TestSessionWithNoRoundsSendsNothingAndStillKeepsItsSockets(t *testing.T) {
	s, st, pk := newParkingSession(t, 0, nil)
	targets := []Target{{testIP4, eth0}, {testIP6, eth0}}
	if err := s.Probe(targets[0], time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(targets); err != nil {
		t.Fatalf("Announce with no rounds: %v", err)
	}
	if err := s.Finish(true); err != nil {
		t.Fatalf("Finish with no rounds: %v", err)
	}
	if err := s.keep.Done(); err != nil {
		t.Fatalf("the keeper's Done: %v", err)
	}
	if len(st.got) != 0 {
		t.Errorf("started %v, want no child: no rounds, and parking worked", st.got)
	}
	if len(pk.calls) != 1 || len(pk.calls[0]) != 1 {
		t.Errorf("parked %v, want one call with the probe's socket", pk.calls)
	}
}

func TestSessionWithNoRoundsOpensNoAnnouncingSocket(t *testing.T) {
	s, n, st := newTestSession(t, 0)
	if err := s.Announce([]Target{{testIP4, eth0}, {testIP6, eth1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(true); err != nil || len(st.got) != 0 {
		t.Errorf("Finish = %v after starting %d children, want none", err, len(st.got))
	}
	if arp, na := n.of("arp"), n.of("na"); len(arp)+len(na) != 0 {
		t.Errorf("opened %d ARP and %d NA sockets with no rounds, want none", len(arp), len(na))
	}
}
