package assigner

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

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
	// NAT steers the external IPs' traffic (traffic.go); nil steers
	// nothing and never touches nftables.
	NAT NAT
	// Traffic is the ADD's mode; Container the container's own
	// addresses from prevResult.
	Traffic   traffic.Mode
	Container []netip.Prefix
	// Routing sends the flows of external IPs on uplinks other than the
	// default route's out of their own uplink (package uplinkroute); nil
	// never does.
	Routing uplinkroute.Routing
	// RouteProtocol holds the ADD's IPs as host routes through the holder
	// with this routing protocol number; 0 holds them as addresses.
	RouteProtocol int
}

// Placed is one IP of an attachment after ADD: where it is announced and
// whether this ADD gave it its first holder.
type Placed struct {
	Addr   netip.Addr
	Uplink host.Uplink
	First  bool
}

// Hooks let the caller act at the two moments only the assigner knows.
type Hooks struct {
	// Probe runs for each IP not yet on the holder, concurrently and before
	// anything changes; an error refuses the ADD with nothing changed.
	Probe func(Placed) error
	// Announce runs once the IPs are on the holder, still under the lock;
	// an error rolls the ADD back.
	Announce func([]Placed) error
}

// Assigner keeps the reference counts of one holder device. It serves one
// call (Add, Del, GC, ...) at a time, and may serve one after another:
// each starts afresh (startCall).
type Assigner struct {
	opts Options
	k    host.Kernel
	st   *store.Store
	log  *slog.Logger
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
	// fresh are the IPs this ADD takes first (see fresh), put those it put
	// on the holder; undoing is set while an ADD is being undone.
	fresh, put map[netip.Addr]bool
	undoing    bool
	// recovering is set while an ADD is undone, or a change's journal
	// rolled back or finished: only then are routes without a chain
	// looked for (uplinkroute.Change.AfterFault).
	recovering bool
	// queue is the conntrack clean-up queue as the call sees it: what it
	// queued, and the runner lock it claimed (package forget); Queued and
	// TakeRunner read it once the call has returned.
	queue *forget.Queue
	// router decides the call's uplink routing, nil without Routing.
	router *uplinkroute.Router
}

// startCall begins a call knowing nothing: every exported method that
// looks at the kernel or the state calls it first
// (TestEveryCallStartsKnowingNothing checks that they do).
func (a *Assigner) startCall() {
	a.dropRunner()
	a.call = call{
		queue:  forget.NewQueue(a.st, a.conntrack(), a.log, a.opts.LockTimeout),
		holder: host.NewHolder(a.k, host.Device{Name: a.opts.Device, DataDir: a.opts.DataDir, State: a.st, Log: a.log, Step: a.at}),
		ups:    host.NewUplinks(a.k, a.opts.Uplink),
	}
	if a.opts.Routing != nil {
		a.router = uplinkroute.NewRouter(a.opts.Routing, a.ups, a.log, a.at)
	}
}

// at is a.step, looked up when the step comes: a test sets its own.
func (a *Assigner) at(step string) { a.step(step) }

// New returns an Assigner working on the host's kernel.
func New(o Options) *Assigner { return newAssigner(o, &host.Netlink{}) }

// heldAs is how this invocation's config holds an IP.
func (a *Assigner) holding() heldAs { return heldAs(a.opts.RouteProtocol) }

func newAssigner(o Options, k host.Kernel) *Assigner {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Assigner{
		opts: o,
		k:    k,
		st:   store.New(o.DataDir, o.Device),
		log:  log.With("device", o.Device),
		step: atStep,
	}
	a.startCall()
	return a
}

// Add records that att holds ips and makes sure each is on the holder
// device, replacing att's earlier record. On error att keeps what it held
// before: its earlier record, or none.
func (a *Assigner) Add(att Attachment, ips []netip.Addr, h Hooks) ([]Placed, error) {
	a.startCall()
	ips = union(nil, ips) // a record lists each IP once, or GC would count it twice
	if len(ips) == 0 {
		return nil, nil
	}
	routes, err := a.holder.Screen(a.ups, a.holding(), ips)
	if err != nil {
		return nil, err
	}
	if err := a.screenContainer(); err != nil {
		return nil, err
	}
	// Probing waits for the LAN, so it runs before the lock, which every
	// other invocation on the node needs.
	if err := a.probe(ips, routes, h.Probe); err != nil {
		return nil, err
	}
	l, err := a.st.Lock(store.MakeAll, a.opts.LockTimeout)
	if err != nil {
		return nil, errkind.OneLine(err)
	}
	defer l.Unlock()
	if err := a.recover(); err != nil {
		return nil, errkind.OneLine(err)
	}
	placed, err := a.add(att, ips, routes, h)
	return placed, errkind.OneLine(err)
}

func (a *Assigner) add(att Attachment, ips []netip.Addr, routes map[netip.Addr]host.Route, h Hooks) ([]Placed, error) {
	// Under the lock: the holder screening saw missing may have been made
	// by another invocation meanwhile.
	if _, err := a.holder.Ensure(); err != nil {
		return nil, err
	}
	key := att.Key()
	old, err := a.st.ReadRecord(key)
	if err != nil {
		return nil, err
	}
	placed, uplinks, err := a.place(ips, routes)
	if err != nil {
		return nil, err
	}
	j := &journal{Op: store.OpAdd, Key: key, Record: &record{Attachment: att, IPs: ips, Steering: a.newSteering(ips, placed), Route: a.holding()}, Touch: slices.Clone(ips), Uplinks: uplinks}
	if old != nil {
		if err := a.remember(j, old); err != nil {
			return nil, err
		}
	}
	a.fresh = fresh(placed, routes)
	if err := a.addJournaled(j, placed, h); err != nil {
		return nil, err
	}
	a.log.Info("added", "attachment", att.String(), "ips", ips)
	// The ADD is done and stays: failing now would tell the runtime it
	// failed while its record holds the IPs.
	// The stale rules are drift that CHECK reports and GC mends.
	if err := a.followReHomed(key, placed, uplinks); err != nil {
		a.log.Warn("egress of the other holders not moved to the re-homed uplink; the next GC moves it", "error", errkind.OneLine(err))
	}
	return placed, nil
}

// addJournaled carries out an ADD's journal and announces. The journal
// stays until the ADD has succeeded, announcement and all: an invocation
// killed before that is rolled back by the next one, and a failure here
// is undone at once.
func (a *Assigner) addJournaled(j *journal, placed []Placed, h Hooks) error {
	if err := a.begin(j); err != nil {
		return err
	}
	if err := a.apply(j); err != nil {
		return a.undo(j, err)
	}
	if h.Announce != nil {
		if err := h.Announce(placed); err != nil {
			return a.undo(j, err)
		}
	}
	a.step("done")
	if err := a.st.Remove(store.JournalFile); err != nil {
		return a.undo(j, err)
	}
	return nil
}

// fresh lists the IPs that were on no interface when screened and that
// this ADD gives their first holder: until this invocation puts one on the
// holder, undoing the ADD has nothing to take off the kernel for it, which
// matters when the kernel refuses every change (no CAP_NET_ADMIN).
func fresh(placed []Placed, routes map[netip.Addr]host.Route) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, p := range placed {
		if p.First && routes[p.Addr].On(p.Addr) == 0 {
			out[p.Addr] = true
		}
	}
	return out
}

// probe asks the LAN, all at once, about every IP that is not yet on the
// holder: only those could be taking an address another host uses.
func (a *Assigner) probe(ips []netip.Addr, routes map[netip.Addr]host.Route, probe func(Placed) error) error {
	if probe == nil {
		return nil
	}
	// Every uplink first, so that no probe is left running on an early return.
	var todo []Placed
	for _, ip := range ips {
		if r := routes[ip]; r.On(ip) == 0 {
			up, err := a.ups.For(ip, r)
			if err != nil {
				return err
			}
			todo = append(todo, Placed{Addr: ip, Uplink: up, First: true})
		}
	}
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, p := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe(p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// remember keeps in a re-ADD's journal what undoing it restores: the
// earlier record, with the uplinks its IPs have now (an IP the new record
// drops is released, and its index forgets the uplink, before an undo
// re-holds it).
func (a *Assigner) remember(j *journal, old *record) error {
	j.Touch = union(old.IPs, j.Touch)
	j.Old, j.OldUplinks = old, map[netip.Addr]string{}
	for _, ip := range old.IPs {
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return err
		}
		j.OldUplinks[ip] = e.Uplink
	}
	return nil
}

// undo gives the attachment back what it held before a failed ADD (its
// earlier record, or none), so that a failed ADD, like a refused one,
// leaves the state as it found it and no address nobody holds; then it
// drops the ADD's journal. If it cannot, the journal stays and the next
// invocation undoes the ADD.
func (a *Assigner) undo(j *journal, cause error) error {
	a.undoing, a.recovering = true, true
	defer func() { a.undoing, a.recovering = false, false }()
	err := a.apply(reverse(j))
	if err == nil {
		err = a.st.Remove(store.JournalFile)
	}
	if err != nil {
		return fmt.Errorf("%w; rolling back also failed: %s; the next invocation rolls it back", cause, errkind.OneLine(err))
	}
	return cause
}

// Del releases att's record and removes every IP nobody holds any more.
// Something already gone is not an error: DEL may come twice.
func (a *Assigner) Del(att Attachment) error {
	a.startCall()
	return a.withState(func() error {
		key := att.Key()
		rec, err := a.st.ReadRecord(key)
		if err != nil || rec == nil {
			return err
		}
		if err := a.commit(releasing(key, rec)); err != nil {
			return err
		}
		a.log.Info("deleted", "attachment", att.String(), "ips", rec.IPs)
		return nil
	})
}

// withState runs f under the lock, once any interrupted change is
// finished. Without a state directory there is nothing to release or
// collect, and nothing is created.
func (a *Assigner) withState(f func() error) error { return a.underLock(false, f) }

// underLock is withState, making the state directory first if create.
func (a *Assigner) underLock(create bool, f func() error) error {
	mode := store.MakeParts
	if create {
		mode = store.MakeAll
	}
	l, err := a.st.Lock(mode, a.opts.LockTimeout)
	if err != nil || l == nil {
		return errkind.OneLine(err)
	}
	defer l.Unlock()
	if err := a.recover(); err != nil {
		return errkind.OneLine(err)
	}
	return errkind.OneLine(f())
}

// lockToRead takes the lock without making anything, for the readers
// (CHECK, status, the announcer's re-check). nil: the state directory, or
// one of its parts, is missing, so there is no state to read.
func (a *Assigner) lockToRead() (*store.Lock, error) {
	return a.st.Lock(store.ReadOnly, a.opts.LockTimeout)
}

// commit carries out a release: begun, applied, its journal dropped.
func (a *Assigner) commit(j *journal) error {
	if err := a.begin(j); err != nil {
		return err
	}
	if err := a.apply(j); err != nil {
		return err
	}
	a.step("done")
	return a.st.Remove(store.JournalFile)
}

// begin makes a change durable in the journal before touching anything
// else. It first reads every index entry the change will touch, so that a
// corrupt one fails the change with nothing changed rather than half-way
// through.
func (a *Assigner) begin(j *journal) error {
	j.Infer()
	for _, ip := range j.Touch {
		if _, err := a.st.ReadIP(ip); err != nil {
			return err
		}
	}
	a.step("journal")
	return a.st.Write(store.JournalFile, j)
}

// reverse is the change that undoes an ADD: the earlier record restored,
// or the attachment released when it had none. It is carried out in place,
// never journaled: the ADD's journal stands for it until it is done.
func reverse(j *journal) *journal {
	if j.Old == nil {
		return &journal{Op: store.OpRelease, Key: j.Key, Touch: j.Touch, Steps: natUndone(j)}
	}
	return &journal{Op: store.OpAdd, Key: j.Key, Record: j.Old, Touch: j.Touch, Uplinks: j.OldUplinks, Steps: natUndone(j)}
}

// recover sweeps what a killed write left in tmp/, removes a holder device a
// crash left half made (see recoverHolder), and settles a change left in the
// journal: an ADD is undone, a release finished.
func (a *Assigner) recover() error {
	if err := a.st.SweepTmp(); err != nil {
		return err
	}
	if err := a.holder.Recover(); err != nil {
		return err
	}
	j, err := a.st.ReadJournal()
	if err != nil || j == nil {
		return err
	}
	if j.Op == store.OpAdd {
		a.log.Warn("rolling back an interrupted ADD", "journal", a.st.Path(store.JournalFile), "key", j.Key)
		j = reverse(j)
	} else {
		a.log.Warn("finishing an interrupted release", "journal", a.st.Path(store.JournalFile), "key", j.Key)
	}
	a.recovering = true
	defer func() { a.recovering = false }()
	if err := a.apply(j); err != nil {
		return err
	}
	return a.st.Remove(store.JournalFile)
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
