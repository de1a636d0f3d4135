package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
)

// announcement sends the first round on each uplink before ADD returns,
// under the assigner's lock, and once the lock is released leaves the later
// rounds, and the slow close of its packet sockets and of the conflict
// probes', to a detached copy of this binary, so that none holds ADD up.
type announcement struct {
	conf    *config.Config
	log     *slog.Logger
	logTo   *announce.PlanLog // for the detached announcer's lines
	senders []*announce.Sender
	groups  []group
	// probed are the conflict probes' sockets, for a child to close.
	mu     sync.Mutex
	probed []*os.File
}

// round is the assigner's Announce hook.
func (a *announcement) round(placed []assigner.Placed) error {
	for _, g := range byUplink(placed) {
		s := announce.NewSender(g.up)
		a.senders, a.groups = append(a.senders, s), append(a.groups, g)
		if err := s.Round(g.ips); err != nil {
			return fmt.Errorf("%w: announcing %v on %s: %w", assigner.ErrAnnounce, g.ips, g.up.Name, err)
		}
		a.log.Info("announced", "uplink", g.up.Name, "ips", g.ips, "round", 1)
	}
	return nil
}

// finish runs after ADD: on success it detaches the later rounds, the
// first child also taking the probes' sockets; on failure it only closes.
func (a *announcement) finish(ok bool) {
	// Our copies go in any case; a child that inherited them keeps its own.
	defer closeAll(a.probed)
	held := a.probed
	for i, s := range a.senders {
		if !ok || (a.conf.Announce.Count < 2 && !s.HasPacketSocket()) {
			s.Close()
			continue
		}
		if err := a.detach(s, a.groups[i], held); err != nil {
			// The first round is out; later rounds only repeat it.
			a.log.Warn("later announcement rounds not started", "uplink", a.groups[i].up.Name, "error", err)
			continue
		}
		held = nil
	}
	if ok && len(held) > 0 && len(a.groups) > 0 {
		// No child was needed for announcing: start one only to hold them.
		a.hold(held)
	}
}

func (a *announcement) detach(s *announce.Sender, g group, extra []*os.File) error {
	files, err := s.Release()
	defer closeAll(files)
	if err != nil {
		return err
	}
	return a.start(announce.Plan{
		Uplink: g.up, IPs: g.ips, Rounds: a.conf.Announce.Count - 1, Interval: a.conf.Announce.Interval, Log: a.logTo,
	}, append(files, extra...))
}

// hold starts a child that sends nothing and only outlives the plugin
// holding files; if it cannot start, the plugin closes them itself.
func (a *announcement) hold(files []*os.File) {
	if err := a.start(announce.Plan{Uplink: a.groups[0].up}, files); err != nil {
		a.log.Warn("probe sockets closed in the plugin", "error", err)
	}
}

func (a *announcement) start(p announce.Plan, files []*os.File) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return announce.Detach(exe, p, files...)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

type group struct {
	up  announce.Uplink
	ips []netip.Addr
}

func byUplink(placed []assigner.Placed) []group {
	var out []group
	at := map[int]int{}
	for _, p := range placed {
		i, ok := at[p.Uplink.Index]
		if !ok {
			i = len(out)
			at[p.Uplink.Index] = i
			out = append(out, group{up: toAnnounce(p.Uplink)})
		}
		out[i].ips = append(out[i].ips, p.Addr)
	}
	return out
}

func toAnnounce(u assigner.Uplink) announce.Uplink {
	return announce.Uplink{Name: u.Name, Index: u.Index, MAC: u.MAC, Router: u.Router}
}

// probe is the assigner's Probe hook: it asks the LAN, before an IP gets
// its first holder on this node, whether another host already answers for
// it. It runs concurrently for each such IP.
func (a *announcement) probe(p assigner.Placed) error {
	mac, sock, err := announce.ProbeKeep(toAnnounce(p.Uplink), p.Addr, a.conf.Probe)
	if sock != nil {
		a.mu.Lock()
		a.probed = append(a.probed, sock)
		a.mu.Unlock()
	}
	if err != nil {
		return assigner.Errorf(assigner.ErrAnnounce, "%s: %w", p.Addr, err)
	}
	if mac != nil {
		return assigner.Errorf(assigner.ErrConflict, "%s: another host (%s) answered the conflict probe on %s; refusing to take the address", p.Addr, mac, p.Uplink.Name)
	}
	return nil
}

// hooks are the assigner's hooks for this ADD; conflictProbe "0s" probes
// nothing.
func (a *announcement) hooks() assigner.Hooks {
	h := assigner.Hooks{Announce: a.round}
	if a.conf.Probe > 0 {
		h.Probe = a.probe
	}
	return h
}

// runAnnouncer is the detached process's whole life. It logs each round
// it sends, as the ADD that started it logged the first.
func runAnnouncer(env string) int {
	plan, err := announce.PlanFromEnv(env)
	if err != nil {
		return 1
	}
	log, done := slog.New(slog.DiscardHandler), func() {}
	if plan.Log != nil {
		if l, d, err := newLog(plan.Log); err == nil {
			log, done = l, d
		}
	}
	defer done()
	err = announce.RunPlan(plan, func(round int, err error) {
		attrs := []any{"uplink", plan.Uplink.Name, "ips", plan.IPs, "round", round, "pid", os.Getpid()}
		if err != nil {
			log.Warn("announcement round failed", append(attrs, "error", err)...)
			return
		}
		log.Info("announced", attrs...)
	})
	if err != nil {
		return 1
	}
	return 0
}

// logTarget is where this invocation logs, for the detached announcer to
// log there too; nil without logFile. The attributes name the invocation
// on every line.
func logTarget(conf *config.Config, args *skel.CmdArgs) *announce.PlanLog {
	if conf.LogFile == "" {
		return nil
	}
	return &announce.PlanLog{File: conf.LogFile, Level: conf.LogLevel, Attrs: []string{
		"network", conf.Name, "container", args.ContainerID, "ifname", args.IfName, "command", os.Getenv("CNI_COMMAND"),
	}}
}

// openLog opens the structured log; stdout belongs to the CNI result.
func openLog(to *announce.PlanLog) (*slog.Logger, func(), error) {
	if to == nil {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	return newLog(to)
}

// newLog opens to.File for appending JSON lines at to.Level and above.
func newLog(to *announce.PlanLog) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(to.Level)); err != nil {
		return nil, nil, fmt.Errorf("%w: logLevel: %w", config.ErrInvalid, err)
	}
	f, err := os.OpenFile(to.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: logFile: %w", config.ErrInvalid, err)
	}
	attrs := make([]any, len(to.Attrs))
	for i, a := range to.Attrs {
		attrs[i] = a
	}
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level})).With(attrs...)
	return log, func() { f.Close() }, nil
}
