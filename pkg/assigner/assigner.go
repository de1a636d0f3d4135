package assigner

import (
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/forget"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// Options configure an Assigner for one holder device.
type Options struct {
	Device  string
	DataDir string
	// Uplink names the interface to announce on; empty chooses it per IP
	// from the route to the IP.
	Uplink      string
	LockTimeout time.Duration
	Log         *slog.Logger
	// NAT steers the external IPs' traffic (steer.go, package steer); nil
	// steers nothing and never touches nftables.
	NAT NAT
	// Traffic is the ADD's mode; Container the container's own
	// addresses from prevResult; Excluded the destinations its flows are
	// never SNATed to the external IP for.
	Traffic             traffic.Mode
	Container, Excluded []netip.Prefix
	// Routing sends the flows of external IPs on uplinks other than the
	// default route's out of their own uplink (package uplinkroute); nil
	// never does.
	Routing uplinkroute.Routing
	// RouteProtocol holds the ADD's IPs as host routes through the holder
	// with this routing protocol number; 0 holds them as addresses.
	RouteProtocol int
	// Probe is how long an ADD's probe of an IP waits for another host's
	// answer (Announcer.Probe); 0 probes nothing.
	Probe time.Duration
	// Owner, when set, says whom an ADD's IPs belong to (owner.go); nil
	// records no owner and checks none.
	Owner Owner
	// Standby holds an IP another host answers the probe for in standby
	// instead of refusing the ADD. Move makes the ADD the node process's
	// move of an existing record between active and standby (standby.go):
	// InStandby are then its IPs held in standby.
	Standby, Move bool
	InStandby     []netip.Addr
	// UplinkDownOK lets a move work with an uplink that is down: the
	// node process's yield, which sends nothing on it (the health gate
	// yields exactly then). A takeover must not: it announces.
	UplinkDownOK bool
	// Netns is the container's namespace, which the ADD's record keeps
	// (store.Record.Netns).
	Netns *store.Netns
	// Goodbye, when set, is told of each IP the release of a record that
	// stands by takes off the holder: a standby node takes it over at once.
	Goodbye func(announce.Target)
}

// Placed is one IP of an attachment after ADD: where it is announced and
// whether this ADD gave it its first holder.
type Placed struct {
	Addr   netip.Addr
	Uplink host.Uplink
	First  bool
	// Standby: another host holds the IP actively; this ADD holds it in
	// standby.
	Standby bool
}

// target is p as package announce sends for it.
func (p Placed) target() announce.Target {
	u := p.Uplink
	return announce.Target{Addr: p.Addr, Uplink: announce.Uplink{Name: u.Name, Index: u.Index, MAC: u.MAC, Router: u.Router}}
}

// Announcer is what an ADD asks of the LAN at the two moments only the
// assigner knows; announce.Session is the plugin's.
type Announcer interface {
	// Probe asks, for wait, whether another host answers for an IP this
	// node is about to take first. It runs for each such IP, concurrently
	// and before anything changes; an error refuses the ADD with nothing
	// changed.
	Probe(t announce.Target, wait time.Duration) error
	// Announce sends the first round for every IP of the attachment once
	// they are on the holder, still under the lock; an error rolls the ADD
	// back.
	Announce(targets []announce.Target) error
}

// Assigner keeps the reference counts of one holder device. It serves one
// call (Add, Del, GC, ...) at a time, and may serve one after another:
// each starts afresh (startCall).
type Assigner struct {
	opts Options
	k    host.Kernel
	st   *store.Store
	log  *slog.Logger
	// how is how this invocation's config holds an IP: as an address, or
	// as a route of its protocol number.
	how heldAs
	// step is called at each named step of a change: atStep, a no-op
	// except in faultinject builds; tests set their own to crash there.
	step func(name string)
	// call is what the call under way has learned.
	call
}

// call is what one call learns and must not hand to the next: between two
// calls the kernel, or another invocation, may change anything.
type call struct {
	// holder is the holder device as the call finds it; ups resolves each
	// uplink once per call.
	holder *host.Holder
	ups    *host.Uplinks
	// queue is the conntrack clean-up queue as the call sees it: what it
	// queued, and the runner lock it claimed (package forget); Conntrack
	// hands it over once the call has returned.
	queue *forget.Queue
	// router decides the call's uplink routing, nil without Routing.
	router *uplinkroute.Router
}

// startCall begins a call knowing nothing: every exported method that
// looks at the kernel or the state calls it first
// (TestEveryCallStartsKnowingNothing checks that they do).
func (a *Assigner) startCall() {
	a.dropRunner()
	// a.step is looked up when the step comes: a test sets its own.
	step := func(name string) { a.step(name) }
	var ct forget.Conntrack // nil: nothing steered, nothing to clean up
	if a.opts.NAT != nil {
		ct = a.opts.NAT
	}
	a.call = call{
		queue:  forget.NewQueue(a.st, ct, a.log, a.opts.LockTimeout),
		holder: host.NewHolder(a.k, host.Device{Name: a.opts.Device, DataDir: a.opts.DataDir, State: a.st, Log: a.log, Step: step}),
		ups:    host.NewUplinks(a.k, a.opts.Uplink),
	}
	a.ups.DownOK = a.opts.Move && a.opts.UplinkDownOK
	if a.opts.Routing != nil {
		a.router = uplinkroute.NewRouter(a.opts.Routing, a.ups, a.log, step, a.opts.LockTimeout)
	}
}

// New returns an Assigner working on the host's kernel.
func New(o Options) *Assigner { return newAssigner(o, &host.Netlink{}) }

func newAssigner(o Options, k host.Kernel) *Assigner {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Assigner{
		opts: o,
		k:    k,
		st:   store.New(o.DataDir, o.Device),
		how:  heldAs(o.RouteProtocol),
		log:  log.With("device", o.Device),
		step: atStep,
	}
	a.startCall()
	return a
}

// withState runs f under the lock, once any interrupted change is
// finished. Without a state directory there is nothing to release or
// collect, and nothing is created.
func (a *Assigner) withState(f func() error) error { return a.underLock(false, f) }

// underLock is withState, making the state directory first if create.
func (a *Assigner) underLock(create bool, f func() error) error {
	return a.locked(create, func() error {
		if err := a.recover(); err != nil {
			return err
		}
		return f()
	})
}

// locked runs f under the lock, making the state directory first if
// create, and leaves any interrupted change as it is: Repair reads it
// before it finishes it.
func (a *Assigner) locked(create bool, f func() error) error {
	mode := store.MakeParts
	if create {
		mode = store.MakeAll
	}
	l, err := a.st.Lock(mode, a.opts.LockTimeout)
	if err != nil || l == nil {
		return errkind.OneLine(err)
	}
	defer l.Unlock()
	return errkind.OneLine(f())
}

// lockToRead takes the lock without making anything, for the readers
// (CHECK, status, the announcer's re-check). nil: the state directory, or
// one of its parts, is missing, so there is no state to read.
func (a *Assigner) lockToRead() (*store.Lock, error) {
	return a.st.Lock(store.ReadOnly, a.opts.LockTimeout)
}

func union(a, b []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	for _, ip := range b {
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}
