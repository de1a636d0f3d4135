package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
)

// announcer sends the first round on each uplink before ADD returns, and
// leaves the later rounds to a detached copy of this binary so that they do
// not hold ADD up.
func announcer(conf *config.Config, log *slog.Logger) func([]assigner.Placed) error {
	return func(placed []assigner.Placed) error {
		for _, g := range byUplink(placed) {
			s := announce.NewSender(g.up)
			err := s.Round(g.ips)
			s.Close()
			if err != nil {
				return fmt.Errorf("%w: announcing %v on %s: %w", assigner.ErrAnnounce, g.ips, g.up.Name, err)
			}
			log.Info("announced", "uplink", g.up.Name, "ips", g.ips, "round", 1)
			detach(conf, g, log)
		}
		return nil
	}
}

func detach(conf *config.Config, g group, log *slog.Logger) {
	if conf.Announce.Count < 2 {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = announce.Detach(exe, announce.Plan{
			Uplink: g.up, IPs: g.ips, Rounds: conf.Announce.Count - 1, Interval: conf.Announce.Interval,
		})
	}
	if err != nil {
		// The first round is out; later rounds only repeat it.
		log.Warn("later announcement rounds not started", "uplink", g.up.Name, "error", err)
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
			u := p.Uplink
			out = append(out, group{up: announce.Uplink{Name: u.Name, Index: u.Index, MAC: u.MAC, Router: u.Router}})
		}
		out[i].ips = append(out[i].ips, p.Addr)
	}
	return out
}

// prober asks the LAN, before an IP gets its first holder on this node,
// whether another host already answers for it; nil (conflictProbe "0s")
// probes nothing.
func prober(conf *config.Config) func(assigner.Placed) error {
	if conf.Probe == 0 {
		return nil
	}
	return func(p assigner.Placed) error {
		u := p.Uplink
		up := announce.Uplink{Name: u.Name, Index: u.Index, MAC: u.MAC, Router: u.Router}
		mac, err := announce.Probe(up, p.Addr, conf.Probe)
		if err != nil {
			return &hookError{kind: assigner.ErrAnnounce, err: err,
				msg: fmt.Sprintf("%s: %v", p.Addr, err)}
		}
		if mac != nil {
			return &hookError{kind: assigner.ErrConflict,
				msg: fmt.Sprintf("%s: another host (%s) answered the conflict probe on %s; refusing to take the address", p.Addr, mac, u.Name)}
		}
		return nil
	}
}

// hookError is an error of kind whose message starts with the IP, which
// cniError looks for to name where the IP was asked for.
type hookError struct {
	kind error
	msg  string
	err  error
}

func (e *hookError) Error() string { return e.msg }

func (e *hookError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}

// runAnnouncer is the detached process's whole life.
func runAnnouncer(env string) int {
	plan, err := announce.PlanFromEnv(env)
	if err == nil {
		err = announce.RunPlan(plan)
	}
	if err != nil {
		return 1
	}
	return 0
}

// openLog opens the structured log; stdout belongs to the CNI result.
func openLog(conf *config.Config, args *skel.CmdArgs) (*slog.Logger, func(), error) {
	if conf.LogFile == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil)), func() {}, nil
	}
	f, err := os.OpenFile(conf.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: logFile: %w", config.ErrInvalid, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(conf.LogLevel)); err != nil {
		return nil, nil, errors.Join(config.ErrInvalid, err)
	}
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level})).With(
		"network", conf.Name, "container", args.ContainerID, "ifname", args.IfName, "command", os.Getenv("CNI_COMMAND"))
	return log, func() { f.Close() }, nil
}
