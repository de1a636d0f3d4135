package standby

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

var (
	ip4      = netip.MustParseAddr("192.0.2.10")
	ip6      = netip.MustParseAddr("2001:db8::10")
	ourMAC   = net.HardwareAddr{2, 0, 0, 0, 0, 5}
	lowMAC   = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	highMAC  = net.HardwareAddr{2, 0, 0, 0, 0, 9}
	ourFrom  = From{MAC: ourMAC, V4: netip.MustParseAddr("192.0.2.2"), Local: netip.MustParseAddr("fe80::2")}
	anUplink = "uplink0"
)

// fakeMoves records the moves and keeps what is held as they leave it;
// gone are the IPs whose containers are gone.
type fakeMoves struct {
	held  map[netip.Addr]*Held
	moves []string
	gone  map[netip.Addr]bool
}

func newFakeMoves(hs ...Held) *fakeMoves {
	m := &fakeMoves{held: map[netip.Addr]*Held{}, gone: map[netip.Addr]bool{}}
	for _, h := range hs {
		m.held[h.IP] = &h
	}
	return m
}

func (m *fakeMoves) Read() ([]Held, error) {
	var out []Held
	for _, h := range m.held {
		out = append(out, *h)
	}
	return out, nil
}

func (m *fakeMoves) TakeOver(h Held) error {
	m.moves = append(m.moves, "takeover "+h.IP.String())
	m.held[h.IP].Active, m.held[h.IP].Standby = true, false
	return nil
}

func (m *fakeMoves) Yield(h Held) error {
	m.moves = append(m.moves, "yield "+h.IP.String())
	m.held[h.IP].Active, m.held[h.IP].Standby = false, true
	return nil
}

func (m *fakeMoves) Announce(h Held) error {
	m.moves = append(m.moves, "announce "+h.IP.String())
	return nil
}

func (m *fakeMoves) Gone(h Held) bool { return m.gone[h.IP] }

func (m *fakeMoves) Goodbye(h Held) error {
	m.moves = append(m.moves, "goodbye "+h.IP.String())
	return nil
}

// fakePorts gives each uplink a fakeConn; down lists the uplinks down.
type fakePorts struct {
	mu   sync.Mutex
	conn *fakeConn
	down map[string]bool
	from From // what the uplink has to check from now
}

func (p *fakePorts) Open(string) (Conn, From, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn = &fakeConn{closed: make(chan struct{})}
	return p.conn, p.from, nil
}

func (p *fakePorts) From(string) (From, error) { return p.from, nil }

func (p *fakePorts) Up(name string) bool { return !p.down[name] }

type fakeConn struct {
	mu     sync.Mutex
	sent   []heard // each frame sent, read back, and where to
	to     []net.HardwareAddr
	closed chan struct{}
	once   sync.Once
}

func (c *fakeConn) WriteFrame(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, read(b))
	c.to = append(c.to, net.HardwareAddr(b[0:6]))
	return nil
}

func (c *fakeConn) ReadFrame([]byte) (int, error) { <-c.closed; return 0, errClosed }
func (c *fakeConn) Close() error                  { c.once.Do(func() { close(c.closed) }); return nil }

// takeSent returns the destinations of what was sent since the last call.
func (c *fakeConn) takeSent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, to := range c.to {
		out = append(out, to.String())
	}
	c.sent, c.to = nil, nil
	return out
}

func newTestWatcher(t *testing.T, m *fakeMoves) (*Watcher, *fakePorts) {
	return newTestWatcherFrom(t, m, ourFrom)
}

func newTestWatcherFrom(t *testing.T, m *fakeMoves, from From) (*Watcher, *fakePorts) {
	ports := &fakePorts{down: map[string]bool{}, from: from}
	w := &Watcher{Moves: m, Ports: ports}
	w.init()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); w.closePorts() })
	w.refresh(ctx)
	return w, ports
}

func TestAStandbyTakesOverAfterMissesInARowAndNotBefore(t *testing.T) {
	for _, ip := range []netip.Addr{ip4, ip6} {
		t.Run(ip.String(), func(t *testing.T) {
			m := newFakeMoves(Held{IP: ip, Uplink: anUplink, Standby: true})
			w, ports := newTestWatcher(t, m)
			w.tick() // the first check: broadcast, the active unknown
			if got := ports.conn.takeSent(); len(got) != 1 || got[0] == highMAC.String() {
				t.Fatalf("first check sent to %v, want one broadcast", got)
			}
			for range 10 { // the active answers every check
				w.seen(anUplink, heard{kind: claim, ip: ip, mac: highMAC})
				w.tick()
				if got := ports.conn.takeSent(); !slices.Equal(got, []string{highMAC.String()}) {
					t.Fatalf("a check to a known active went to %v, want its MAC alone (unicast)", got)
				}
			}
			for i := range DefaultMisses {
				if len(m.moves) != 0 {
					t.Fatalf("took over after %d misses, want %d", i, DefaultMisses)
				}
				w.tick()
				if got := ports.conn.takeSent(); i < DefaultMisses-1 && len(got) != 2 {
					t.Errorf("after a miss the check went to %v, want unicast and broadcast", got)
				}
			}
			if !slices.Equal(m.moves, []string{"takeover " + ip.String()}) {
				t.Fatalf("after %d misses in a row: moves %v, want one takeover", DefaultMisses, m.moves)
			}
		})
	}
}

// On a lossy LAN an active misses a check now and then; only misses in a
// row mean it is gone, so an answer between them starts the count again.
func TestMissesBrokenByAnAnswerNeverAddUpToATakeover(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	w, _ := newTestWatcher(t, m)
	w.tick() // the first check
	for round := range 20 {
		for range DefaultMisses - 1 {
			w.tick() // unanswered
		}
		w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
		w.tick()
		if len(m.moves) != 0 {
			t.Fatalf("round %d of %d misses then an answer: moves %v, want none", round, DefaultMisses-1, m.moves)
		}
	}
}

func TestAGoodbyeFromTheActiveIsTakenOverAtOnceAndOneFromAnotherHostIsNot(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	w, ports := newTestWatcher(t, m)
	w.tick()
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
	w.seen(anUplink, heard{kind: goodbye, ip: ip4, mac: lowMAC})
	if len(m.moves) != 0 {
		t.Fatalf("a probe from a host that is not the active took the IP over: %v", m.moves)
	}
	w.seen(anUplink, heard{kind: goodbye, ip: ip4, mac: highMAC})
	if !slices.Equal(m.moves, []string{"takeover " + ip4.String()}) {
		t.Fatalf("the active's goodbye: moves %v, want a takeover", m.moves)
	}
	w.tick()
	if got := ports.conn.takeSent(); len(got) != 1 {
		t.Errorf("after a takeover at a goodbye the watch sent %v; want only the check before it: the node that said goodbye holds nothing", got)
	}
}

// The health gates: an active whose uplink goes down yields; one whose
// containers are all gone yields and says goodbye, once.
func TestAnActiveGivesTheIPUpWhenItsUplinkOrItsContainersGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*fakeMoves, *fakePorts)
		want  []string
	}{
		{"uplink down", func(_ *fakeMoves, p *fakePorts) { p.down[anUplink] = true }, []string{"yield " + ip4.String()}},
		{"containers gone", func(m *fakeMoves, _ *fakePorts) { m.gone[ip4] = true }, []string{"yield " + ip4.String(), "goodbye " + ip4.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true})
			w, ports := newTestWatcher(t, m)
			w.tick()
			if len(m.moves) != 0 {
				t.Fatalf("a healthy active moved: %v", m.moves)
			}
			tc.fault(m, ports)
			w.tick()
			w.tick()
			if !slices.Equal(m.moves, tc.want) {
				t.Fatalf("%s: moves %v, want %v, once", tc.name, m.moves, tc.want)
			}
		})
	}
}

func TestAStandbyWhoseContainersAreGoneNeverTakesOver(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	m.gone[ip4] = true
	w, ports := newTestWatcher(t, m)
	for range 3 * DefaultMisses {
		w.tick()
	}
	if len(m.moves) != 0 {
		t.Fatalf("a standby whose containers are gone moved: %v", m.moves)
	}
	if got := ports.conn.takeSent(); len(got) != 0 {
		t.Errorf("a standby whose containers are gone checked the active: %v", got)
	}
}

// A standby cut off from the LAN (its uplink has no carrier, and its
// frames still go out without an error) counts no misses: taking over
// then would make a second active, which preempts the first when the
// carrier is back. Back, it checks for the active again before counting.
func TestAStandbyWhoseUplinkIsDownNeverTakesOver(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	w, ports := newTestWatcher(t, m)
	w.tick()
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
	w.tick()
	ports.down[anUplink] = true
	for range 3 * DefaultMisses {
		w.tick()
	}
	if len(m.moves) != 0 {
		t.Fatalf("a standby whose uplink is down moved: %v", m.moves)
	}
	ports.down[anUplink] = false
	ports.conn.takeSent()
	w.tick()
	if got := ports.conn.takeSent(); len(got) != 1 || got[0] == highMAC.String() {
		t.Errorf("back, the first check went to %v; want one broadcast (the active learnt anew)", got)
	}
	for range DefaultMisses - 1 {
		w.tick()
	}
	if len(m.moves) != 0 {
		t.Fatalf("back, took over before %d misses in a row: %v", DefaultMisses, m.moves)
	}
}

// An uplink with no address of the IP's family when the watch opened it
// (no link-local before its carrier, no IPv4 address before DHCP) sends no
// check, so counts no miss of an active that is alive; once it has the
// address, the next read of the state finds it and checks go out.
func TestNoCheckGoesOutWithoutAnAddressToCheckFromUntilTheUplinkHasOne(t *testing.T) {
	for _, ip := range []netip.Addr{ip4, ip6} {
		t.Run(ip.String(), func(t *testing.T) {
			m := newFakeMoves(Held{IP: ip, Uplink: anUplink, Standby: true})
			w, ports := newTestWatcherFrom(t, m, From{MAC: ourMAC})
			for range 3 * DefaultMisses {
				w.tick()
			}
			if len(m.moves) != 0 || len(ports.conn.takeSent()) != 0 {
				t.Fatalf("with no address to check from: moves %v; want none, and no check sent", m.moves)
			}
			ports.from = ourFrom
			w.refresh(context.Background())
			w.tick()
			if got := ports.conn.takeSent(); len(got) != 1 {
				t.Fatalf("with the address come: checks sent %v, want one", got)
			}
		})
	}
}

// An IP active here beside standby holders is not taken over (repaired)
// while the uplink is down: it yields.
func TestAnActiveWithStandbyHoldersYieldsWhenItsUplinkIsDown(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true, Standby: true})
	w, ports := newTestWatcher(t, m)
	ports.down[anUplink] = true
	w.tick()
	if !slices.Equal(m.moves, []string{"yield " + ip4.String()}) {
		t.Fatalf("moves %v, want a yield", m.moves)
	}
}

func TestOfTwoActivesTheLowerMACYieldsAndTheHigherAnnounces(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true})
	w, _ := newTestWatcher(t, m)
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: lowMAC})
	if !slices.Equal(m.moves, []string{"announce " + ip4.String()}) {
		t.Fatalf("a lower MAC claims the IP: moves %v, want an announcement", m.moves)
	}
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: lowMAC})
	if len(m.moves) != 1 {
		t.Errorf("announced twice within a second: %v", m.moves)
	}
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
	if m.moves[len(m.moves)-1] != "yield "+ip4.String() {
		t.Fatalf("a higher MAC claims the IP: moves %v, want a yield", m.moves)
	}
	w.tick() // now standing by, it checks the new active, unicast
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
	w.tick()
	if n := len(m.moves); n != 2 {
		t.Errorf("after yielding, moves %v: no preemption, no flapping", m.moves)
	}
}

func TestStandbyHoldersBesideActiveOnesAreTakenOver(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true, Standby: true})
	w, _ := newTestWatcher(t, m)
	w.tick()
	if !slices.Equal(m.moves, []string{"takeover " + ip4.String()}) {
		t.Fatalf("an IP active here with standby holders too: moves %v, want them taken over", m.moves)
	}
}

func TestTheChecksReadBackAsAsksAndTheGoodbyeAsAGoodbye(t *testing.T) {
	for _, ip := range []netip.Addr{ip4, ip6} {
		f, err := check(ourFrom, ip, highMAC)
		if err != nil {
			t.Fatal(err)
		}
		if h := read(f); h.kind != ask || h.ip != ip || h.mac.String() != ourMAC.String() {
			t.Errorf("%s: a check reads back as %+v, want an ask from %s", ip, h, ourMAC)
		}
		if got := net.HardwareAddr(f[0:6]).String(); got != highMAC.String() {
			t.Errorf("%s: a check to the active goes to %s", ip, got)
		}
	}
}

// Another node asking a neighbour from the IP (the IP as the ARP sender,
// the solicitation's source) uses it: held actively here, that is a
// conflict like its answer; standing by, it shows the active alive.
func TestAnAskFromTheIPItselfClaimsIt(t *testing.T) {
	for _, ip := range []netip.Addr{ip4, ip6} {
		t.Run(ip.String(), func(t *testing.T) {
			gw := netip.MustParseAddr("192.0.2.1")
			if ip.Is6() {
				gw = netip.MustParseAddr("fe80::1")
			}
			f, err := check(From{MAC: highMAC, V4: ip, Local: ip}, gw, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := read(f)
			m := newFakeMoves(Held{IP: ip, Uplink: anUplink, Active: true})
			w, _ := newTestWatcher(t, m)
			if !w.seen(anUplink, h) || !slices.Equal(m.moves, []string{"yield " + ip.String()}) {
				t.Fatalf("active here, a higher MAC asking from %s (%+v): moves %v, want a yield", ip, h, m.moves)
			}
			sb := newFakeMoves(Held{IP: ip, Uplink: anUplink, Standby: true})
			w, _ = newTestWatcher(t, sb)
			w.tick()
			w.seen(anUplink, h)
			for range 3 * DefaultMisses {
				w.tick()
				w.seen(anUplink, h)
			}
			if len(sb.moves) != 0 {
				t.Errorf("standing by, the active asking from %s every period: moves %v, want none", ip, sb.moves)
			}
		})
	}
}

// The goodbye the plugin sends (announce.Goodbye: an RFC 5227 probe, a
// DAD solicitation) reads as a goodbye from the releasing node's MAC.
func TestAnRFC5227ProbeReadsAsAGoodbye(t *testing.T) {
	p, err := arp.NewPacket(arp.OperationRequest, highMAC, netip.IPv4Unspecified(), make(net.HardwareAddr, 6), ip4)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := p.MarshalBinary()
	f, _ := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: highMAC, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if h := read(f); h.kind != goodbye || h.ip != ip4 || h.mac.String() != highMAC.String() {
		t.Errorf("an ARP probe for %s reads as %+v, want a goodbye from %s", ip4, h, highMAC)
	}
	dad, err := check(From{MAC: highMAC, Local: netip.IPv6Unspecified()}, ip6, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := read(dad); h.kind != goodbye || h.ip != ip6 {
		t.Errorf("a solicitation for %s from :: reads as %+v, want a goodbye", ip6, h)
	}
}

// fakeClaims answers for each IP what its claim names (absent: no claim
// names a node) and records what it is told.
type fakeClaims struct {
	names map[netip.Addr]string // "here" or "there"
	told  []string
}

func (c *fakeClaims) TookOver(ip netip.Addr, reason string) {
	c.told = append(c.told, "took over "+ip.String()+" "+reason)
}

func (c *fakeClaims) Yielded(ip netip.Addr, reason string) {
	c.told = append(c.told, "yielded "+ip.String()+" "+reason)
}

func (c *fakeClaims) ActiveHere(ip netip.Addr) (here, known bool) {
	name, known := c.names[ip]
	return name == "here", known
}

func TestTheClaimDecidesBetweenTwoActivesOverTheMACRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claim  string // "": the claim names no node
		theirs net.HardwareAddr
		want   string
	}{
		{"the claim names this node against a higher MAC", "here", highMAC, "announce"},
		{"the claim names the other node against a lower MAC", "there", lowMAC, "yield"},
		{"no claim names a node: a higher MAC wins", "", highMAC, "yield"},
		{"no claim names a node: a lower MAC loses", "", lowMAC, "announce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true})
			w, _ := newTestWatcher(t, m)
			c := &fakeClaims{names: map[netip.Addr]string{}}
			if tc.claim != "" {
				c.names[ip4] = tc.claim
			}
			w.Claims = c
			w.seen(anUplink, heard{kind: claim, ip: ip4, mac: tc.theirs})
			if want := []string{tc.want + " " + ip4.String()}; !slices.Equal(m.moves, want) {
				t.Fatalf("another node claims the IP: moves %v, want %v", m.moves, want)
			}
		})
	}
}

// Both nodes' claims name themselves (one cache is stale: its node was
// cut off from the API server too): the claim decides for staleClaim,
// then the MAC rule, which both compute alike, so one yields.
func TestAClaimBothNodesReadAsTheirOwnDecidesOnlyForAWhile(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Active: true})
	w, _ := newTestWatcher(t, m)
	w.Claims = &fakeClaims{names: map[netip.Addr]string{ip4: "here"}}
	now := time.Now()
	w.now = func() time.Time { return now }
	for range 3 {
		w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
		now = now.Add(time.Second)
	}
	if slices.Contains(m.moves, "yield "+ip4.String()) {
		t.Fatalf("yielded within %s of the dispute though the claim names this node: %v", staleClaim, m.moves)
	}
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: highMAC})
	if m.moves[len(m.moves)-1] != "yield "+ip4.String() {
		t.Fatalf("after %s of dispute against a higher MAC: moves %v, want a yield", staleClaim, m.moves)
	}
}

func TestTheClaimsAreToldOfEveryTakeoverAndYield(t *testing.T) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	w, ports := newTestWatcher(t, m)
	c := &fakeClaims{}
	w.Claims = c
	for range DefaultMisses + 1 {
		w.tick() // unanswered
	}
	ports.down[anUplink] = true
	w.tick()
	want := []string{"took over " + ip4.String() + " " + ReasonUnanswered, "yielded " + ip4.String() + " " + ReasonUplinkDown}
	if !slices.Equal(c.told, want) {
		t.Fatalf("the claims were told %v, want %v (moves %v)", c.told, want, m.moves)
	}
}

// twoStandbys are two nodes standing by for ip4 on one LAN, each with a
// watcher of its own, both reading a claim that names a third node (the
// active, deadMAC) that still holds the IP: its pod object outlives it.
type twoStandbys struct {
	w    [2]*Watcher
	m    [2]*fakeMoves
	macs [2]net.HardwareAddr
}

var deadMAC = net.HardwareAddr{2, 0, 0, 0, 0, 7}

func newTwoStandbys(t *testing.T) *twoStandbys {
	p := &twoStandbys{macs: [2]net.HardwareAddr{lowMAC, highMAC}}
	for i, mac := range p.macs {
		p.m[i] = newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
		p.w[i], _ = newTestWatcherFrom(t, p.m[i], From{MAC: mac, V4: netip.AddrFrom4([4]byte{192, 0, 2, byte(2 + i)}), Local: ourFrom.Local})
		p.w[i].Claims = &fakeClaims{names: map[netip.Addr]string{ip4: "there"}}
	}
	return p
}

// period is one check period on the LAN: both watchers tick, then each
// hears the other if it holds the IP actively (its takeover's or its
// defence's announcement, its answer to a check), and both hear the
// active dead node while alive. Who answers is taken after both ticks:
// two takeovers in one period announce at once.
func (p *twoStandbys) period(deadAlive bool) {
	p.w[0].tick()
	p.w[1].tick()
	if deadAlive {
		p.hear(heard{kind: claim, ip: ip4, mac: deadMAC})
	}
	p.hearEachOther()
}

func (p *twoStandbys) hear(h heard) {
	p.w[0].seen(anUplink, h)
	p.w[1].seen(anUplink, h)
}

func (p *twoStandbys) hearEachOther() {
	active := [2]bool{p.active(0), p.active(1)}
	for i := range 2 {
		if active[1-i] {
			p.w[i].seen(anUplink, heard{kind: claim, ip: ip4, mac: p.macs[1-i]})
		}
	}
}

func (p *twoStandbys) active(i int) bool { return p.m[i].held[ip4].Active }

// moved counts the takeovers and yields both nodes made.
func (p *twoStandbys) moved() int {
	n := 0
	for _, m := range p.m {
		for _, mv := range m.moves {
			if !strings.HasPrefix(mv, "announce") {
				n++
			}
		}
	}
	return n
}

// The active node dies (power lost): its holder stays on the claim for
// minutes, and the claim still names it. Both standbys miss their checks
// and take over in the same period, and each hears the other. A claim
// naming the node they both found dead settles nothing between them: the
// MAC rule leaves one active, for good. The same when both hear its
// goodbye while their caches still show its name.
func TestTwoStandbysThatTakeOverAtOnceFromADeadActiveLeaveOneActive(t *testing.T) {
	for _, death := range []string{"power lost", "goodbye"} {
		t.Run(death, func(t *testing.T) {
			p := newTwoStandbys(t)
			for range 2 {
				p.period(true)
			}
			if death == "goodbye" {
				p.hear(heard{kind: goodbye, ip: ip4, mac: deadMAC})
				p.hearEachOther()
			}
			for range 2 * DefaultMisses {
				p.period(false)
			}
			if p.active(0) == p.active(1) {
				t.Fatalf("%d periods after the active died: active %v and %v, want exactly one (moves %v and %v)", 2*DefaultMisses, p.active(0), p.active(1), p.m[0].moves, p.m[1].moves)
			}
			if !p.active(1) {
				t.Errorf("the node with the lower MAC kept the IP: the MAC rule leaves the higher")
			}
			settled := p.moved()
			for i := range 5 * DefaultMisses {
				p.period(false)
				if p.active(0) == p.active(1) || p.moved() != settled {
					t.Fatalf("%d periods after settling: active %v and %v, moves %v and %v; want the same one active, no flapping", i+1, p.active(0), p.active(1), p.m[0].moves, p.m[1].moves)
				}
			}
		})
	}
}

// takenOverFrom is an active node that took ip4 over from the node with
// deadMAC, after its checks went unanswered, while the claim named that
// node (here: "there").
func takenOverFrom(t *testing.T, c *fakeClaims) (*Watcher, *fakeMoves) {
	m := newFakeMoves(Held{IP: ip4, Uplink: anUplink, Standby: true})
	w, _ := newTestWatcherFrom(t, m, From{MAC: highMAC, V4: ourFrom.V4, Local: ourFrom.Local})
	w.Claims = c
	w.tick()
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: deadMAC})
	for range DefaultMisses + 1 {
		w.tick()
	}
	if !slices.Equal(m.moves, []string{"takeover " + ip4.String()}) {
		t.Fatalf("the active missed %d checks: moves %v, want a takeover", DefaultMisses, m.moves)
	}
	return w, m
}

// A partition heals: the node taken over from is alive and answers, and
// the claim still names it (this node's write never reached the API
// server). The claim names the node heard, so it keeps the IP, whatever
// the MACs say.
func TestTheNodeTakenOverFromKeepsTheIPWhenTheClaimStillNamesIt(t *testing.T) {
	w, m := takenOverFrom(t, &fakeClaims{names: map[netip.Addr]string{ip4: "there"}})
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: deadMAC})
	if got := m.moves[len(m.moves)-1]; got != "yield "+ip4.String() {
		t.Fatalf("the node taken over from, named by the claim, answers: moves %v, want a yield though this node's MAC is the higher", m.moves)
	}
}

// Once the claim has said something else since the takeover (this node's
// write reached it), another node it names is one that wrote later, not
// the node found gone: the claim decides again.
func TestAClaimThatChangedSinceTheTakeoverDecidesAgainstAnyNode(t *testing.T) {
	c := &fakeClaims{names: map[netip.Addr]string{ip4: "there"}}
	w, m := takenOverFrom(t, c)
	c.names[ip4] = "here"
	w.tick()
	c.names[ip4] = "there"
	w.seen(anUplink, heard{kind: claim, ip: ip4, mac: lowMAC})
	if got := m.moves[len(m.moves)-1]; got != "yield "+ip4.String() {
		t.Fatalf("the claim names another node written since the takeover: moves %v, want a yield though this node's MAC is the higher", m.moves)
	}
}

// Two actives hear each other while the claim names a third node that
// does not answer (alive and standing by, its yield's write lost): both
// yield to it. Neither answers the other's checks then, so each takes
// the IP over from a node it never heard answer as the active: the
// claim, naming neither, settles nothing, and the MAC rule leaves one.
func TestTwoActivesThatBothYieldedToAThirdNodeSettleOnTheirNextTakeover(t *testing.T) {
	p := newTwoStandbys(t)
	for i := range p.m {
		p.m[i].held[ip4].Active, p.m[i].held[ip4].Standby = true, false
		p.w[i].refresh(context.Background())
	}
	p.period(false)
	if p.active(0) || p.active(1) {
		t.Fatalf("the claim names a third node: active %v and %v, want both to yield to it", p.active(0), p.active(1))
	}
	for range 2 * DefaultMisses {
		p.period(false)
	}
	if p.active(0) == p.active(1) {
		t.Fatalf("%d periods after both yielded: active %v and %v, want exactly one (moves %v and %v)", 2*DefaultMisses, p.active(0), p.active(1), p.m[0].moves, p.m[1].moves)
	}
	settled := p.moved()
	for range 5 * DefaultMisses {
		p.period(false)
	}
	if p.active(0) == p.active(1) || p.moved() != settled {
		t.Fatalf("after settling: active %v and %v, moves %v and %v; want one active, no flapping", p.active(0), p.active(1), p.m[0].moves, p.m[1].moves)
	}
}
