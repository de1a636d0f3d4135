package assigner

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
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
}

// Placed is one IP of an attachment after ADD: where it is announced and
// whether this ADD gave it its first holder.
type Placed struct {
	Addr   netip.Addr
	Uplink Uplink
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

// Assigner keeps the reference counts of one holder device.
type Assigner struct {
	opts Options
	k    kernel
	st   *store
	log  *slog.Logger
	// hook, set only by tests, is called at each named step of a change.
	hook func(step string)
	// seen is the holder's index as screening found it (0: missing or not
	// yet marked); dev is the holder once made or checked under the lock.
	// Both live as long as the invocation.
	seen, dev int
	// ups resolves each uplink once per invocation.
	ups uplinkCache
}

// New returns an Assigner working on the host's kernel.
func New(o Options) *Assigner { return newAssigner(o, &hostKernel{}) }

func newAssigner(o Options, k kernel) *Assigner {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Assigner{
		opts: o,
		k:    k,
		ups:  uplinkCache{k: k},
		st:   &store{dir: filepath.Join(o.DataDir, o.Device)},
		log:  log.With("device", o.Device),
		hook: stepHook,
	}
}

// Add records that att holds ips and makes sure each is on the holder
// device, replacing att's earlier record. On error att keeps what it held
// before: its earlier record, or none.
func (a *Assigner) Add(att Attachment, ips []netip.Addr, h Hooks) ([]Placed, error) {
	ips = union(nil, ips) // a record lists each IP once, or GC would count it twice
	if len(ips) == 0 {
		return nil, nil
	}
	routes, err := a.screen(ips)
	if err != nil {
		return nil, err
	}
	// Probing waits for the LAN, so it runs before the lock, which every
	// other invocation on the node needs.
	if err := a.probe(ips, routes, h.Probe); err != nil {
		return nil, err
	}
	if err := a.st.init(); err != nil {
		return nil, err
	}
	l, err := a.lock()
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	if err := a.recover(); err != nil {
		return nil, err
	}
	return a.add(att, ips, routes, h)
}

func (a *Assigner) add(att Attachment, ips []netip.Addr, routes map[netip.Addr]route, h Hooks) ([]Placed, error) {
	// Under the lock, whoever was making the holder has marked it: a device
	// that screening could not judge is ours now, or it never will be.
	if _, err := a.ensureHolder(); err != nil {
		return nil, err
	}
	key := att.key()
	old, err := a.st.readRecord(key)
	if err != nil {
		return nil, err
	}
	placed, uplinks, err := a.place(ips, routes)
	if err != nil {
		return nil, err
	}
	touch := slices.Clone(ips)
	undo := &journal{Key: key, Touch: touch}
	if old != nil {
		touch = union(old.IPs, ips)
		if undo, err = a.restoring(key, old, touch); err != nil {
			return nil, err
		}
	}
	j := &journal{Key: key, Record: &record{Attachment: att, IPs: ips}, Touch: touch, Uplinks: uplinks}
	if err := a.commit(j); err != nil {
		return nil, a.rollback(undo, err)
	}
	if h.Announce != nil {
		if err := h.Announce(placed); err != nil {
			return nil, a.rollback(undo, err)
		}
	}
	a.log.Info("added", "attachment", att.String(), "ips", ips)
	return placed, nil
}

// probe asks the LAN, all at once, about every IP that is not yet on the
// holder: only those could be taking an address another host uses.
func (a *Assigner) probe(ips []netip.Addr, routes map[netip.Addr]route, probe func(Placed) error) error {
	if probe == nil {
		return nil
	}
	// Every uplink first, so that no probe is left running on an early return.
	var todo []Placed
	for _, ip := range ips {
		if r := routes[ip]; r.local == 0 {
			up, err := a.uplinkFor(ip, r)
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

// restoring is the change that gives a re-ADDed attachment back its earlier
// record, with the uplinks its IPs have now: an IP the new record drops is
// released, and its index forgets the uplink, before a rollback re-holds it.
func (a *Assigner) restoring(key string, old *record, touch []netip.Addr) (*journal, error) {
	undo := &journal{Key: key, Record: old, Touch: touch, Uplinks: map[netip.Addr]string{}}
	for _, ip := range old.IPs {
		e, err := a.st.readIP(ip)
		if err != nil {
			return nil, err
		}
		undo.Uplinks[ip] = e.Uplink
	}
	return undo, nil
}

// rollback undoes a failed ADD with undo: the attachment's earlier record
// restored, or released when it had none. A failed ADD, like a refused one,
// so leaves the state as it found it and no address nobody holds.
func (a *Assigner) rollback(undo *journal, cause error) error {
	if err := a.commit(undo); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// Del releases att's record and removes every IP nobody holds any more.
// Something already gone is not an error: DEL may come twice.
func (a *Assigner) Del(att Attachment) error {
	return a.withState(func() error {
		key := att.key()
		rec, err := a.st.readRecord(key)
		if err != nil || rec == nil {
			return err
		}
		if err := a.commit(&journal{Key: key, Touch: rec.IPs}); err != nil {
			return err
		}
		a.log.Info("deleted", "attachment", att.String(), "ips", rec.IPs)
		return nil
	})
}

// withState runs f under the lock, once any interrupted change is
// finished. Without a state directory there is nothing to release or
// collect, and nothing is created.
func (a *Assigner) withState(f func() error) error {
	if !a.st.exists() {
		return nil
	}
	l, err := a.lock()
	if err != nil {
		return err
	}
	defer l.unlock()
	if err := a.recover(); err != nil {
		return err
	}
	return f()
}

func (a *Assigner) lock() (*lockFile, error) {
	return lock(a.st.lockPath(), a.opts.LockTimeout)
}

// commit makes a change durable in the journal before touching anything
// else, applies it, then drops the journal. It first reads every index
// entry the change will touch, so that a corrupt one fails the change with
// nothing changed rather than half-way through.
func (a *Assigner) commit(j *journal) error {
	for _, ip := range j.Touch {
		if _, err := a.st.readIP(ip); err != nil {
			return err
		}
	}
	a.hook("journal")
	if err := a.st.writeJSON(a.st.journalPath(), j); err != nil {
		return err
	}
	if err := a.apply(j); err != nil {
		return err
	}
	a.hook("done")
	return a.st.remove(a.st.journalPath())
}

// recover finishes a change that a crashed invocation left in the journal,
// and a holder device it left made but not marked.
func (a *Assigner) recover() error {
	if fileExists(a.st.creatingPath()) {
		if _, err := a.k.holder(a.opts.Device, false, true); err != nil {
			return err
		}
		if err := a.st.remove(a.st.creatingPath()); err != nil {
			return err
		}
	}
	j, err := a.st.readJournal()
	if err != nil || j == nil {
		return err
	}
	a.log.Warn("finishing an interrupted change", "journal", a.st.journalPath(), "key", j.Key)
	if err := a.apply(j); err != nil {
		return err
	}
	if err := a.st.remove(a.st.journalPath()); err != nil {
		return err
	}
	return a.st.sweepTmp()
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
