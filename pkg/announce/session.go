package announce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// Target is one IP to announce or probe for and the uplink it goes out on.
type Target struct {
	Addr   netip.Addr
	Uplink Uplink
}

// SessionOptions configure one ADD's Session.
type SessionOptions struct {
	// Rounds is the whole count, the first round included; Interval is
	// the time between rounds.
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
	// Park, when set, has the kernel hold files past this process's exit
	// (park.Files) and closes them; when it fails they are still ours, and
	// a child started only to hold them takes them. Nil parks nothing.
	Park func(files []*os.File) error
	// HeldHere, when set, is asked after a conflict whether this node's
	// state records a holder of the address (known false: it could not
	// tell), so that the refusal can say the node does not hold it.
	HeldHere func(netip.Addr) (held, known bool)
}

// Session is one ADD's announcing: its conflict probes, its first round on
// each uplink, and after ADD the hand-over of the later rounds and of its
// packet sockets to detached children, or of the sockets alone to the
// kernel (SessionOptions.Park), so that neither the rounds nor the slow
// last close of an AF_PACKET socket (see Sender.Release) holds ADD up.
type Session struct {
	o       SessionOptions
	mu      sync.Mutex
	probed  []Conn // guarded by mu: probes run concurrently
	senders []*Sender
	targets [][]netip.Addr // per sender, its IPs
	kept    []*os.File     // Keep's files, handed over with the probes'
}

// Keep gives Finish a file whose last close is slow (the NAT table's: see
// nat.Table.File) to keep open past the plugin's exit with the probes'
// sockets: in the first child it starts, else parked or in a holding
// child. Finish closes our copy in every case.
func (s *Session) Keep(f *os.File) {
	s.mu.Lock()
	s.kept = append(s.kept, f)
	s.mu.Unlock()
}

// NewSession returns a Session that has sent nothing yet.
func NewSession(o SessionOptions) *Session {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Start == nil {
		o.Start = startSelf
	}
	return &Session{o: o}
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
	mac, c, err := probe(s.o.Sockets, t.Uplink, t.Addr, wait)
	if c != nil {
		s.mu.Lock()
		s.probed = append(s.probed, c)
		s.mu.Unlock()
	}
	if err != nil {
		return errkind.Errorf(ErrAnnounce, "%s: %w", t.Addr, err)
	}
	if mac != nil {
		return s.conflict(t, mac)
	}
	return nil
}

// conflict is the refusal of t.Addr that mac answered for: one line, the
// one a person reads in kubelet's event, naming the address, who answered,
// whether this node holds it, and what to do.
func (s *Session) conflict(t Target, mac net.HardwareAddr) error {
	here := ""
	if s.o.HeldHere != nil {
		if held, known := s.o.HeldHere(t.Addr); known && !held {
			here = ", and this node does not hold it"
		}
	}
	return errkind.Errorf(ErrConflict, "%s: another host (%s) answered the conflict probe on %s%s: release it on that host, then retry",
		t.Addr, mac, t.Uplink.Name, here)
}

// Announce sends the first round for targets, one Sender per uplink, in the
// order the uplinks first appear. It stops at the first uplink that fails.
func (s *Session) Announce(targets []Target) error {
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
// detached child, and the first child started also takes the probes' and
// Keep's sockets. The slow-to-close sockets that no such child took (the
// packet sockets of uplinks with no round left, and the probes' and Keep's
// when there was none) are parked (see SessionOptions.Park), or else given
// to one child started only to hold them. A child that inherits sockets is
// told through a pipe when the plugin has closed its own copies, so that
// its close is the last. What could not be handed over is closed here and
// returned as an error, for a warning: the first round is out, so the ADD
// stands.
func (s *Session) Finish(ok bool) error {
	var errs []error
	var signals []*os.File
	defer func() {
		s.closeProbes()
		closeAll(s.kept)
		s.kept = nil
		closeAll(signals) // after every copy of ours is closed
	}()
	if !ok {
		for _, snd := range s.senders {
			snd.Close()
		}
		return nil
	}
	var rest []*os.File // slow to close, and no announcing child has them
	handed := len(s.probed)+len(s.kept) == 0
	for i, snd := range s.senders {
		files, err := snd.Release()
		if err == nil && s.o.Rounds < 2 {
			rest = append(rest, files...)
			continue
		}
		var probes []*os.File
		if err == nil && !handed {
			probes, err = s.probeFiles()
		}
		if err != nil {
			closeAll(files)
			errs = append(errs, err)
			continue
		}
		w, err := s.start(s.plan(snd.up, s.targets[i], s.o.Rounds-1), append(files, probes...))
		if err != nil {
			errs = append(errs, fmt.Errorf("later rounds on %s not started: %w", snd.up.Name, err))
			continue
		}
		signals, handed = append(signals, w), handed || len(probes) > 0
	}
	if !handed && len(s.senders) > 0 {
		probes, err := s.probeFiles()
		if err != nil {
			errs = append(errs, fmt.Errorf("probe sockets closed in the plugin: %w", err))
		}
		rest = append(rest, probes...)
	}
	w, err := s.hold(rest)
	if err != nil {
		errs = append(errs, fmt.Errorf("sockets closed in the plugin: %w", err))
	}
	signals = append(signals, w)
	return errors.Join(errs...)
}

// hold keeps what no announcing child took open past the plugin's exit.
func (s *Session) hold(files []*os.File) (*os.File, error) {
	h := Holder{Park: s.o.Park, Start: s.o.Start, Log: s.o.Logger}
	return h.Hold(s.plan(s.senders[0].up, nil, 0), "sockets", files)
}

// start starts an announcing child for p (see startPiped).
func (s *Session) start(p Plan, files []*os.File) (*os.File, error) {
	return startPiped(s.o.Start, p, files)
}

// probeFiles duplicates the probes' sockets for a child to inherit.
func (s *Session) probeFiles() ([]*os.File, error) {
	var files []*os.File
	for _, c := range s.probed {
		h, ok := c.(handover)
		if !ok {
			continue
		}
		f, err := h.File()
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("handing over a probe socket: %w", err)
		}
		files = append(files, f)
	}
	for _, f := range s.kept {
		d, err := dup(f)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("handing over a kept file: %w", err)
		}
		files = append(files, d)
	}
	return files, nil
}

// dup is a copy of f that the child's inheritance may close.
func dup(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
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
