package announce

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/external-ip/external-ip/pkg/detach"
)

// EnvPlan is the environment variable that carries a Plan, as JSON, to a
// detached announcer. The plugin's main checks it before anything else.
const EnvPlan = "EXTERNAL_IP_ANNOUNCE_PLAN"

// maxPlanLen keeps one plan's environment string under Linux's 128 KiB limit
// on a single argument or environment string (MAX_ARG_STRLEN), past which
// exec fails with E2BIG. About 4,000 IPv4 addresses fit.
const maxPlanLen = 100 << 10

// Plan is what a detached announcer sends after the first round.
type Plan struct {
	Uplink   Uplink
	IPs      []netip.Addr
	Rounds   int           // rounds left after the caller's first
	Interval time.Duration // before each of them
	// Log is the caller's, carried to the detached process as is: where
	// it reports the rounds (see Runner.Report).
	Log *PlanLog
	// Owner is carried for the child's Runner.WhileHeld; nil checks nothing.
	Owner *Owner
	// Hold says that the child's fd 3 is a pipe whose write end the caller
	// closes once it has closed its own copies of the files the child
	// inherits from fd 4 on: the child reads it to EOF before anything
	// else, so that its close of those sockets is the last (see
	// Sender.Release).
	Hold bool
}

// Owner names the attachment whose IPs a plan announces and the state
// directory that records who holds them. Package announce only carries it,
// for the child to ask, before each round, whether the IPs are still held.
type Owner struct {
	DataDir     string `json:"dataDir"`
	Device      string `json:"device"`
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// PlanLog names a log for a detached announcer: a file to append JSON lines
// to, their lowest level, and attributes as key, value pairs.
type PlanLog struct {
	File  string   `json:"file"`
	Level string   `json:"level,omitempty"`
	Attrs []string `json:"attrs,omitempty"`
}

// planJSON is Plan as it travels: MAC and interval as text, so the variable
// reads well in /proc/PID/environ and round-trips exactly.
type planJSON struct {
	Name     string       `json:"uplink"`
	Index    int          `json:"index"`
	MAC      string       `json:"mac"`
	Router   bool         `json:"router,omitempty"`
	IPs      []netip.Addr `json:"ips"`
	Rounds   int          `json:"rounds"`
	Interval string       `json:"interval"`
	Log      *PlanLog     `json:"log,omitempty"`
	Owner    *Owner       `json:"owner,omitempty"`
	Hold     bool         `json:"hold,omitempty"`
}

// MarshalJSON encodes p with the MAC as "aa:bb:cc:dd:ee:ff" and the interval
// as a Go duration string.
func (p Plan) MarshalJSON() ([]byte, error) {
	return json.Marshal(planJSON{
		Name: p.Uplink.Name, Index: p.Uplink.Index, MAC: p.Uplink.MAC.String(), Router: p.Uplink.Router,
		IPs: p.IPs, Rounds: p.Rounds, Interval: p.Interval.String(), Log: p.Log, Owner: p.Owner, Hold: p.Hold,
	})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var w planJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	mac, err := net.ParseMAC(w.MAC)
	if err != nil {
		return fmt.Errorf("mac: %w", err)
	}
	interval, err := time.ParseDuration(w.Interval)
	if err != nil {
		return fmt.Errorf("interval: %w", err)
	}
	*p = Plan{
		Uplink: Uplink{Name: w.Name, Index: w.Index, MAC: mac, Router: w.Router},
		IPs:    w.IPs, Rounds: w.Rounds, Interval: interval, Log: w.Log, Owner: w.Owner, Hold: w.Hold,
	}
	return nil
}

// holdOnly is EnvPlan's whole value for a plan with no rounds left: its
// child only holds the caller's sockets (Hold) and sends nothing, so it
// needs no uplink, IPs or log, and the caller no JSON encoding (a cold
// encoder is a measurable part of an ADD: docs/performance.md, "Figures
// behind design choices").
const holdOnly = "hold"

// PlanFromEnv decodes and checks the value of EnvPlan.
func PlanFromEnv(v string) (Plan, error) {
	if v == holdOnly {
		return Plan{Hold: true}, nil
	}
	var p Plan
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return Plan{}, fmt.Errorf("decoding %s: %w", EnvPlan, err)
	}
	switch {
	case p.Uplink.Name == "" || p.Uplink.Index <= 0:
		return Plan{}, fmt.Errorf("%s: uplink %q index %d is not an interface", EnvPlan, p.Uplink.Name, p.Uplink.Index)
	case len(p.Uplink.MAC) != ethernetAddrLen:
		return Plan{}, fmt.Errorf("%s: uplink MAC %q is not a 6-byte Ethernet address", EnvPlan, p.Uplink.MAC)
	case p.Rounds < 0 || p.Interval < 0:
		return Plan{}, fmt.Errorf("%s: rounds %d and interval %s must not be negative", EnvPlan, p.Rounds, p.Interval)
	}
	return p, nil
}

// Detach starts exe (the plugin binary itself, from os.Executable) to send
// the plan's later rounds, and returns once it has started, without waiting.
// The child gets its own session, so the runtime's signals to the plugin's
// process group do not reach it, and /dev/null for stdin, stdout and stderr:
// the runtime reads the plugin's stdout to EOF, so an inherited stdout would
// hold ADD until the last round. It inherits the network namespace of the
// calling thread. A plan too big for one environment string is split across
// several children.
//
// keep are files the child inherits from fd 3 on (with p.Hold, keep[0] is
// the hold pipe); only the first child of a split plan gets them. Detach
// closes the caller's copies of keep, started or not.
func Detach(exe string, p Plan, keep ...*os.File) error {
	defer closeAll(keep)
	if p.Hold && p.Rounds == 0 {
		return start(exe, EnvPlan+"="+holdOnly, keep)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding announcement plan for %s: %w", p.Uplink.Name, err)
	}
	if len(b) > maxPlanLen && len(p.IPs) > 1 {
		first, second := p, p
		first.IPs, second.IPs = p.IPs[:len(p.IPs)/2], p.IPs[len(p.IPs)/2:]
		second.Hold = false
		return errors.Join(Detach(exe, first, keep...), Detach(exe, second))
	}
	return start(exe, EnvPlan+"="+string(b), keep)
}

// start starts exe as a detached child (package detach) with plan in its
// environment and keep from fd 3 on.
func start(exe, plan string, keep []*os.File) error {
	files := make([]uintptr, len(keep))
	for i, f := range keep {
		files[i] = f.Fd()
	}
	if err := detach.Start(exe, plan, files...); err != nil {
		return fmt.Errorf("starting announcer %s: %w", exe, err)
	}
	return nil
}

// holdFD is where a child of a Plan with Hold finds the hold pipe.
const holdFD = 3

// Runner runs a Plan in the detached child.
type Runner struct {
	// Sockets opens the Conns; the zero value opens raw sockets.
	Sockets Sockets
	// WhileHeld, if set, runs send with those of ips that are still held,
	// under whatever lock keeps that answer true while send runs: so a
	// release (DEL, GC) that has returned has stopped every later round
	// for its IPs. It does not call send when none is held, and the plan
	// then ends.
	WhileHeld func(ips []netip.Addr, send func(held []netip.Addr) error) error
	// Report, if set, hears of each round as it goes: its number,
	// counting the caller's first as 1, and its error.
	Report func(round int, err error)
	// hold, if set, stands for the hold pipe at fd 3 in tests.
	hold *os.File
}

// Run waits for the hold pipe, if the plan has one, then sends p.Rounds
// rounds, sleeping p.Interval before each because the caller already sent
// the first. It returns with every round's failure joined; a failed round
// does not stop the next, since the uplink may come back.
func (r Runner) Run(p Plan) error {
	if p.Hold {
		// EOF once the caller has closed its copies of our sockets.
		hold := r.hold
		if hold == nil {
			hold = os.NewFile(holdFD, "hold")
		}
		io.Copy(io.Discard, hold)
		hold.Close()
	}
	s := NewSenderOn(p.Uplink, r.Sockets)
	var errs []error
	for i := 0; i < p.Rounds; i++ {
		time.Sleep(p.Interval)
		sent, err := r.round(s, p.IPs)
		if !sent {
			break // released: nothing of ours left to announce
		}
		if r.Report != nil {
			r.Report(i+2, err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("round %d: %w", i+2, err))
		}
	}
	errs = append(errs, s.Close())
	return errors.Join(errs...)
}

// round sends one round of the IPs still held, and says whether any was.
func (r Runner) round(s *Sender, ips []netip.Addr) (sent bool, err error) {
	if r.WhileHeld == nil {
		return true, s.Round(ips)
	}
	err = r.WhileHeld(ips, func(held []netip.Addr) error {
		sent = true
		return s.Round(held)
	})
	return sent || err != nil, err
}
