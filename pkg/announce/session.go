package announce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/linger"
)

// Target is one IP to announce or probe for and the uplink it goes out on.
type Target struct {
	Addr   netip.Addr
	Uplink Uplink
}

// SessionOptions configure one ADD's Session.
type SessionOptions struct {
	// Rounds is the whole count, the first round included (0: none, for
	// announce.count 0); Interval is the time between rounds.
	Rounds   int
	Interval time.Duration
	// Log and Owner travel in each Plan to the detached child.
	Log   *PlanLog
	Owner *Owner
	// Logger hears of each first round sent; nil discards.
	Logger *slog.Logger
	// Sockets opens the Conns; the zero value opens raw sockets.
	Sockets Sockets
	// Start starts a detached child for p that inherits files, and owns
	// files from then on: it closes them, started or not. Nil starts this
	// binary with Detach.
	Start func(p Plan, files []*os.File) error
	// Keeper is given the packet sockets, whose last close is slow, and
	// boards them on the announcing children; the caller ends it (Done)
	// once it has closed its own copies. Nil: the session has a keeper of
	// its own, which holds what no announcing child took in a child
	// started by Start, and Finish ends it.
	Keeper *linger.Keeper
	// HeldHere, when set, is asked after a conflict whether this node's
	// state records a holder of the address (known false: it could not
	// tell), so that the refusal can say the node does not hold it.
	HeldHere func(netip.Addr) (held, known bool)
	// StandsBy: the network stands by, and an IP another host answers for
	// is held in standby. Another host's probe heard alone then refuses
	// nothing: it holds no IP to stand by for (a node saying goodbye, or
	// one taking the IP at the same moment, which the node processes'
	// tie-break then settles), and standing by for it would leave the IP
	// dark until the watch's checks go unanswered.
	StandsBy bool
}

// Session is one ADD's announcing: its conflict probes, its first round on
// each uplink, and after ADD the hand-over of the later rounds to detached
// children, so that the rounds never hold ADD up. Its packet sockets go to
// the Keeper (package linger), so that their slow last close (see
// Sender.Release) does not either.
type Session struct {
	o       SessionOptions
	keep    *linger.Keeper
	own     bool // keep is the session's: Finish ends it
	mu      sync.Mutex
	probed  []Conn // guarded by mu: probes run concurrently
	senders []*Sender
	targets [][]netip.Addr // per sender, its IPs
}

// NewSession returns a Session that has sent nothing yet.
func NewSession(o SessionOptions) *Session {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Start == nil {
		o.Start = startSelf
	}
	s := &Session{o: o, keep: o.Keeper}
	if s.keep == nil {
		hold := func(files []*os.File) error { return o.Start(Plan{Hold: true}, files) }
		s.keep, s.own = linger.New(linger.Options{Hold: hold, Log: o.Logger}), true
	}
	return s
}

// startSelf starts this binary, which must dispatch EnvPlan to a Runner.
func startSelf(p Plan, files []*os.File) error {
	exe, err := os.Executable()
	if err != nil {
		closeAll(files)
		return fmt.Errorf("starting announcer: %w", err)
	}
	return Detach(exe, p, files...)
}

// Probe asks t's LAN for wait whether another host already answers for
// t.Addr: ErrConflict naming it if one does, ErrAnnounce if the probe could
// not be sent or heard. It is safe to run for several targets at once; its
// socket is kept for Finish to hand over.
func (s *Session) Probe(t Target, wait time.Duration) error {
	from, err := s.askFrom(t)
	if err != nil {
		return err
	}
	got, c, err := probe(s.o.Sockets, t.Uplink, t.Addr, from, wait)
	if c != nil {
		s.mu.Lock()
		s.probed = append(s.probed, c)
		s.mu.Unlock()
	}
	switch {
	case err != nil:
		return errkind.Errorf(ErrAnnounce, "%s: %w", t.Addr, err)
	case got == nil:
		return nil
	case got.Probing && s.o.StandsBy:
		s.o.Logger.Info("another host probed for the IP, and none answered: taking it", "ip", t.Addr, "prober", got.MAC.String())
		return nil
	}
	return s.conflict(t, got)
}

// askFrom is the uplink's own address t's IPv4 probe asks from (see
// probe); none for IPv6, and none, logged, where the uplink has no IPv4
// address, since the probe then cannot see a node holding t.Addr as a
// route.
func (s *Session) askFrom(t Target) (netip.Addr, error) {
	if !t.Addr.Is4() {
		return netip.Addr{}, nil
	}
	from, err := s.o.Sockets.askFrom(t.Uplink, t.Addr)
	if err != nil {
		return from, errkind.Errorf(ErrAnnounce, "%s: probing on %s: %w", t.Addr, t.Uplink.Name, err)
	}
	if !from.IsValid() {
		s.o.Logger.Warn("the uplink has no IPv4 address: the conflict probe asks only from 0.0.0.0, which a node holding the IP as a route does not answer",
			"uplink", t.Uplink.Name, "ip", t.Addr)
	}
	return from, nil
}

// conflict is the refusal of t.Addr that who answered or probed for: one
// line, the one a person reads in kubelet's event, naming the address, who
// answered, whether this node holds it, and what to do.
func (s *Session) conflict(t Target, who *Answered) error {
	here := ""
	if s.o.HeldHere != nil {
		if held, known := s.o.HeldHere(t.Addr); known && !held {
			here = ", and this node does not hold it"
		}
	}
	if who.Probing {
		return errkind.Errorf(ErrConflict, "%s: another host (%w) probed for it on %s while this node did%s: retry once it has taken or left it",
			t.Addr, who, t.Uplink.Name, here)
	}
	return errkind.Errorf(ErrConflict, "%s: another host (%w) answered the conflict probe on %s%s: release it on that host, then retry",
		t.Addr, who, t.Uplink.Name, here)
}

// Answered is the host that answered a conflict probe, in the chain of an
// ErrConflict error (errors.As): a node whose network stands by holds the
// IP in standby instead of failing. Probing: it did not answer, but
// probed for the IP itself (RFC 5227 section 2.1.1, RFC 4862 section
// 5.4.3), as two hosts taking an IP at once do, or a node's goodbye.
type Answered struct {
	MAC     net.HardwareAddr
	Probing bool
}

func (a *Answered) Error() string { return a.MAC.String() }

// Announce sends the first round for targets, one Sender per uplink, in the
// order the uplinks first appear. It stops at the first uplink that fails.
// With Rounds 0 it sends nothing and opens no socket.
func (s *Session) Announce(targets []Target) error {
	if s.o.Rounds < 1 {
		return nil
	}
	for _, g := range byUplink(targets) {
		snd := NewSenderOn(g.up, s.o.Sockets)
		s.senders, s.targets = append(s.senders, snd), append(s.targets, g.ips)
		if err := snd.Round(g.ips); err != nil {
			return errkind.Errorf(ErrAnnounce, "announcing %v on %s: %w", g.ips, g.up.Name, err)
		}
		s.o.Logger.Info("announced", "uplink", g.up.Name, "ips", g.ips, "round", 1)
	}
	return nil
}

type group struct {
	up  Uplink
	ips []netip.Addr
}

func byUplink(targets []Target) []group {
	var out []group
	at := map[int]int{}
	for _, t := range targets {
		i, ok := at[t.Uplink.Index]
		if !ok {
			i = len(out)
			at[t.Uplink.Index] = i
			out = append(out, group{up: t.Uplink})
		}
		out[i].ips = append(out[i].ips, t.Addr)
	}
	return out
}

// Finish ends the session once ADD is decided. After a failed ADD it only
// closes. After a successful one, each uplink with rounds left goes to a
// detached child; the probes' and senders' packet sockets go to the
// Keeper, which boards what it holds on each of those children. What
// could not be handed over is returned as an error, for a warning: the
// first round is out, so the ADD stands.
func (s *Session) Finish(ok bool) error {
	if !ok {
		for _, snd := range s.senders {
			snd.Close()
		}
		s.closeProbes()
		return s.done(nil)
	}
	var errs []error
	if err := s.keepProbes(); err != nil {
		errs = append(errs, fmt.Errorf("probe sockets closed in the plugin: %w", err))
	}
	for i, snd := range s.senders {
		files, err := snd.Release()
		for _, f := range files {
			s.keep.Keep(f, linger.Packet)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if err != nil || s.o.Rounds < 2 {
			continue
		}
		p := s.plan(snd.up, s.targets[i], s.o.Rounds-1)
		if err := s.keep.Board(func(files []*os.File) error { p.Hold = len(files) > 0; return s.o.Start(p, files) }); err != nil {
			errs = append(errs, fmt.Errorf("later rounds on %s not started: %w", snd.up.Name, err))
		}
	}
	s.closeProbes()
	return s.done(errs)
}

// done ends the session's own keeper, after every copy of ours is closed.
func (s *Session) done(errs []error) error {
	if s.own {
		errs = append(errs, s.keep.Done())
	}
	return errors.Join(errs...)
}

// keepProbes gives the Keeper copies of the probes' packet sockets.
func (s *Session) keepProbes() error {
	for _, c := range s.probed {
		h, ok := c.(handover)
		if !ok {
			continue
		}
		f, err := h.File()
		if err != nil {
			return err
		}
		s.keep.Keep(f, linger.Packet)
	}
	return nil
}

func (s *Session) closeProbes() {
	for _, c := range s.probed {
		c.Close()
	}
	s.probed = nil
}

func (s *Session) plan(up Uplink, ips []netip.Addr, rounds int) Plan {
	return Plan{Uplink: up, IPs: ips, Rounds: rounds, Interval: s.o.Interval, Log: s.o.Log, Owner: s.o.Owner}
}

// closeAll closes files that are ours, nil ones skipped.
func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
