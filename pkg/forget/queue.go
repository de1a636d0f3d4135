package forget

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// Conntrack is what the queue asks of the node: its conntrack entries
// (package nat's deletion) and our table's record of the addresses that
// had flows (the seen sets); steer.HostTable is the host's, tests give a
// fake.
type Conntrack interface {
	// Forget deletes the conntrack entries of flows to ip DNATed to
	// target, or, with no target, every entry our rules made for ip.
	Forget(ip, target netip.Addr) error
	// StartPass says that the Forgets to come were all queued before now
	// (one pass of Drain), so that they may share the walks they make.
	StartPass()
	// Tracked says whether the node has any conntrack entry at all.
	Tracked() (bool, error)
	// Seen says whether our rules recorded a flow NATed for addr: an
	// external IP DNATed to a target, or a container address SNATed.
	Seen(addr netip.Addr) (bool, error)
	// Unsee forgets that addrs had flows, once their clean-up is done.
	Unsee(addrs []netip.Addr) error
}

// Queue is the conntrack clean-up queue of one state directory as one
// call sees it: what the call queued (Queued), and the runner lock it
// claimed while it held the state lock (TakeRunner hands it over).
type Queue struct {
	st          *store.Store
	ct          Conntrack
	log         *slog.Logger
	lockTimeout time.Duration
	queued      bool
	// claim is the runner lock tried under the state lock once the call
	// queued: nil when not tried, claim.r nil when another runner holds it.
	claim *claimed
}

type claimed struct{ r *os.File }

// NewQueue begins a call's view of st's queue, with nothing queued or
// claimed yet; ct nil cleans nothing up (no steering, no conntrack).
func NewQueue(st *store.Store, ct Conntrack, log *slog.Logger, lockTimeout time.Duration) *Queue {
	return &Queue{st: st, ct: ct, log: log, lockTimeout: lockTimeout}
}

// Bound is how soon after the change that queued it a clean-up is
// due: past it, a queued clean-up is drift (status, CHECK). The detached
// child takes milliseconds; the bound leaves room for a loaded node.
const Bound = time.Second

// Entry is one queued clean-up: the flows to IP DNATed to Target,
// or with no target every flow our rules made for IP (it left the node).
type Entry struct {
	IP     netip.Addr `json:"ip"`
	Target netip.Addr `json:"target,omitzero"`
	// Since is when the change that queued it committed; a later change of
	// the same pair moves it, so that a clean-up that started before does
	// not take it off the queue.
	Since time.Time `json:"since"`
	Error string    `json:"error,omitempty"`
	Tries int       `json:"tries,omitempty"`
}

func (e Entry) same(o Entry) bool { return e.IP == o.IP && e.Target == o.Target }

// key names the entry as queued at its time: a pair queued again is new
// to a runner that tried it before.
func (e Entry) key() string {
	return e.IP.String() + ">" + e.Target.String() + "@" + e.Since.Format(time.RFC3339Nano)
}

func (e Entry) String() string {
	if e.Target.IsValid() {
		return fmt.Sprintf("flows to %s DNATed to %s", e.IP, e.Target)
	}
	return fmt.Sprintf("flows of %s", e.IP)
}

// Add records leaving's clean-ups, under the lock, when the node
// has any conntrack entry at all: with none, no entry can be of a flow to
// what left (the count is read after the commit). It never fails the
// change: an entry it cannot queue is logged, and only waits for its
// timeout.
func (q *Queue) Add(leaving []steer.Gone) {
	if len(leaving) == 0 {
		return
	}
	if some, err := q.ct.Tracked(); err == nil && !some {
		return
	}
	now := time.Now()
	var add []Entry
	for _, g := range leaving {
		add = append(add, Entry{IP: g.IP, Target: g.Target, Since: now})
	}
	entries, err := q.read()
	if err == nil {
		entries = mergeForgets(entries, add)
		err = q.st.Write(store.ConntrackFile, entries)
	}
	if err != nil {
		q.log.Warn("conntrack clean-up not queued; its entries live until they time out", "flows", add, "error", errkind.OneLine(err))
		return
	}
	q.queued = true
	q.claimRunner()
}

// Leaving queues the clean-ups of leaving that may find conntrack
// entries of ours, asked after the change's commit: a target's flows when
// our rules recorded a flow to its IP (Seen), an IP's when they recorded
// one to it or from a container address whose egress the change removed
// (dels). The rules record an IP before they DNAT to it, so an IP not
// recorded after the commit had no flow DNATed; a container's SNATed
// flows are its own, and it is stopped when its DEL comes. The rest needs
// no clean-up: a DEL of an IP that never had a flow starts no runner. A
// read that fails counts as recorded. The container addresses are then
// forgotten (Unsee), after the queue is written, so that a replay of a
// change that crashed before still finds them; an external IP that left
// is the runner's to forget once its flows are deleted (Settle),
// or forgotten here when nothing was queued for it (the node has no
// conntrack entry).
func (q *Queue) Leaving(leaving []steer.Gone, dels []nat.EgressKey) {
	var sources []netip.Addr
	for _, k := range dels {
		if !slices.Contains(sources, k.Source) && q.seen(k.Source) {
			sources = append(sources, k.Source)
		}
	}
	var had []steer.Gone
	for _, g := range leaving {
		fromSeen := slices.ContainsFunc(sources, func(s netip.Addr) bool { return s.Is4() == g.IP.Is4() })
		if !g.Target.IsValid() && fromSeen || q.seen(g.IP) {
			had = append(had, g)
		}
	}
	q.Add(had)
	unsee := sources
	for _, g := range had {
		if !q.queued && !g.Target.IsValid() {
			unsee = append(unsee, g.IP)
		}
	}
	q.unsee(unsee)
}

// seen says whether our rules recorded a flow of addr; a read that fails
// says yes, so that the clean-up runs.
func (q *Queue) seen(addr netip.Addr) bool {
	ok, err := q.ct.Seen(addr)
	return err != nil || ok
}

// unsee forgets that addrs had flows. A failure only costs a later change
// a clean-up that finds nothing, so it is logged.
func (q *Queue) unsee(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	if err := q.ct.Unsee(addrs); err != nil {
		q.log.Warn("addresses kept as having had flows; a later change cleans up for nothing", "addresses", addrs, "error", errkind.OneLine(err))
	}
}

// mergeForgets adds add to entries, a pair already there moved to add's
// time with its error cleared: the clean-up it needs starts afresh.
func mergeForgets(entries, add []Entry) []Entry {
	for _, e := range add {
		if i := slices.IndexFunc(entries, e.same); i >= 0 {
			entries[i] = e
			continue
		}
		entries = append(entries, e)
	}
	return entries
}

func (q *Queue) read() ([]Entry, error) {
	var entries []Entry
	_, err := q.st.Read(store.ConntrackFile, &entries)
	return entries, err
}

// Queued says whether the call queued a conntrack clean-up. Its caller
// then takes the runner (TakeRunner) and, if it gets it, has a detached
// child Drain the queue.
func (q *Queue) Queued() bool { return q.queued }

// Run drains the queue in this process, as GC and repair do,
// unless another runner is draining it already (that one takes what is
// queued now too). It fails when a clean-up failed; the failure is in the
// queue, for status, CHECK, GC and repair.
func (q *Queue) Run() error {
	if q.ct == nil {
		return nil
	}
	r, err := q.TakeRunner()
	if err != nil || r == nil {
		return err
	}
	return q.Drain(r)
}

// Drain works through the queue while it holds r, the runner lock: each
// pass reads, under the state lock, the entries it has not tried yet
// (those queued meanwhile included), deletes their flows off the lock,
// then takes off the queue what was done and records what failed. Each
// entry is tried once per runner, so a failing one ends the drain; GC and
// repair retry it. It closes r, once nothing is left under the state lock.
func (q *Queue) Drain(r *os.File) error {
	defer r.Close() // on an error: GC and repair take what stays queued
	if q.ct == nil {
		return nil
	}
	tried := map[string]bool{}
	var failed []error
	for pass := 0; ; pass++ {
		todo, err := q.untried(tried, r)
		if err != nil || len(todo) == 0 {
			return errors.Join(append(failed, err)...)
		}
		if pass == 0 {
			conntrackStall()
		}
		q.ct.StartPass()
		errs := make([]error, len(todo))
		for i, e := range todo {
			tried[e.key()] = true
			errs[i] = q.ct.Forget(e.IP, e.Target)
			if errs[i] != nil {
				q.log.Warn("conntrack clean-up failed; GC or repair retries it", "flows", e.String(), "error", errkind.OneLine(errs[i]))
			}
		}
		if err := q.Settle(todo, errs); err != nil {
			return err
		}
		failed = append(failed, errs...)
	}
}

// untried reads, under the state lock, the queued entries this runner has
// not tried. With none it lets the runner lock go before the state lock:
// a change that queues after that finds the runner free and starts one,
// one that queued before is in what was read.
func (q *Queue) untried(tried map[string]bool, r *os.File) ([]Entry, error) {
	l, err := q.st.Lock(store.ReadOnly, q.lockTimeout)
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	entries, err := q.read()
	if err != nil {
		return nil, err
	}
	entries = slices.DeleteFunc(entries, func(e Entry) bool { return tried[e.key()] })
	if len(entries) == 0 {
		r.Close()
	}
	return entries, nil
}

// Pending reads the queue under the lock, none when there is no
// state.
func (q *Queue) Pending() ([]Entry, error) {
	l, err := q.st.Lock(store.ReadOnly, q.lockTimeout)
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	return q.read()
}

// Settle takes off the queue each entry of done (read by Pending, or a
// pass of Drain) that succeeded, as long as no later change queued its
// pair again, and records the errors of those that failed.
func (q *Queue) Settle(done []Entry, errs []error) error {
	l, err := q.st.Lock(store.MakeParts, q.lockTimeout)
	if err != nil {
		return err
	}
	if l == nil {
		// The state directory went while the flows were deleted: no
		// record holds any IP now, and the queue went with it.
		q.unsee(released(done, errs, func(netip.Addr) bool { return true }))
		return nil
	}
	defer l.Unlock()
	entries, err := q.read()
	if err != nil {
		return err
	}
	out := entries[:0]
	for _, e := range entries {
		i := slices.IndexFunc(done, func(d Entry) bool { return d.same(e) && d.Since.Equal(e.Since) })
		switch {
		case i < 0:
		case errs[i] == nil:
			continue
		default:
			e.Error, e.Tries = errkind.OneLine(errs[i]).Error(), e.Tries+1
		}
		out = append(out, e)
	}
	q.unsee(released(done, errs, q.unheld))
	if len(out) == 0 {
		return q.st.Remove(store.ConntrackFile)
	}
	return q.st.Write(store.ConntrackFile, out)
}

// released lists the external IPs whose flows done deleted (errs[i] nil)
// that unheld says nobody holds now, so that the table forgets they had
// flows: no rule steers them, so no flow can be recorded for them
// meanwhile. One held again keeps its record, which its own new flows may
// have made.
func released(done []Entry, errs []error, unheld func(netip.Addr) bool) []netip.Addr {
	var out []netip.Addr
	for i, e := range done {
		if errs[i] == nil && !e.Target.IsValid() && !slices.Contains(out, e.IP) && unheld(e.IP) {
			out = append(out, e.IP)
		}
	}
	return out
}

// unheld says, under the state lock, whether nobody holds ip.
func (q *Queue) unheld(ip netip.Addr) bool {
	ent, err := q.st.ReadIP(ip)
	return err == nil && len(ent.Holders) == 0
}

// Overdue lists the queued clean-ups that failed or are past Bound,
// for the reports; ip, when valid, keeps only that IP's.
func (q *Queue) Overdue(ip netip.Addr) ([]string, error) {
	entries, err := q.read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if ip.IsValid() && e.IP != ip {
			continue
		}
		switch {
		case e.Error != "":
			out = append(out, fmt.Sprintf("conntrack: %s not deleted after %d tries (%s); GC or repair retries", e, e.Tries, e.Error))
		case time.Since(e.Since) > Bound:
			out = append(out, fmt.Sprintf("conntrack: %s not deleted since %s; GC or repair deletes them", e, e.Since.UTC().Format(time.RFC3339)))
		}
	}
	return out, nil
}

// Check fails CHECK when a clean-up of one of ips is overdue: some
// of their clients may still send to a target that left.
func (q *Queue) Check(ips []netip.Addr) error {
	for _, ip := range ips {
		late, err := q.Overdue(ip)
		if err != nil {
			return err
		}
		if len(late) > 0 {
			return errkind.Errorf(errkind.Drift, "%s", late[0])
		}
	}
	return nil
}
