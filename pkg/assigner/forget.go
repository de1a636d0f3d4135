package assigner

// Deleting the conntrack entries of a target that left, off the lock.
//
// A change that stops steering an IP to a target (a DEL, a re-ADD, GC's
// stray rules) queues the target here under the lock, once its commit has
// taken the rules out: from then on no new flow goes to it. The entries
// already made are deleted after the lock is released (Drain), by one
// runner at a time per state directory (forget_run.go): a detached child
// for ADD and DEL, GC and repair themselves. Finding them walks the
// kernel's whole conntrack hash, which must hold neither the node's other
// invocations nor the runtime, and happen once per drain rather than once
// per DEL in a storm of DELs. It is a best-effort
// clean-up, as portmap's: a failure is logged, kept in the queue with its
// error (status and CHECK report it), and retried by GC and repair; it
// never fails a change nor blocks the next one.

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// ForgetBound is how soon after the change that queued it a clean-up is
// due: past it, a queued clean-up is drift (status, CHECK). The detached
// child takes milliseconds; the bound leaves room for a loaded node.
const ForgetBound = time.Second

// forgetEntry is one queued clean-up: the flows to IP DNATed to Target,
// or with no target every flow our rules made for IP (it left the node).
type forgetEntry struct {
	IP     netip.Addr `json:"ip"`
	Target netip.Addr `json:"target,omitzero"`
	// Since is when the change that queued it committed; a later change of
	// the same pair moves it, so that a clean-up that started before does
	// not take it off the queue.
	Since time.Time `json:"since"`
	Error string    `json:"error,omitempty"`
	Tries int       `json:"tries,omitempty"`
}

func (e forgetEntry) same(o forgetEntry) bool { return e.IP == o.IP && e.Target == o.Target }

// key names the entry as queued at its time: a pair queued again is new
// to a runner that tried it before.
func (e forgetEntry) key() string {
	return e.IP.String() + ">" + e.Target.String() + "@" + e.Since.Format(time.RFC3339Nano)
}

func (e forgetEntry) String() string {
	if e.Target.IsValid() {
		return fmt.Sprintf("flows to %s DNATed to %s", e.IP, e.Target)
	}
	return fmt.Sprintf("flows of %s", e.IP)
}

// queueForget records leaving's clean-ups, under the lock, when the node
// has any conntrack entry at all: with none, no entry can be of a flow to
// what left (the count is read after the commit). It never fails the
// change: an entry it cannot queue is logged, and only waits for its
// timeout.
func (a *Assigner) queueForget(leaving []steer.Gone) {
	if len(leaving) == 0 {
		return
	}
	if some, err := a.opts.NAT.Tracked(); err == nil && !some {
		return
	}
	now := time.Now()
	var add []forgetEntry
	for _, g := range leaving {
		add = append(add, forgetEntry{IP: g.IP, Target: g.Target, Since: now})
	}
	q, err := a.readForgets()
	if err == nil {
		q = mergeForgets(q, add)
		err = a.st.Write(store.ConntrackFile, q)
	}
	if err != nil {
		a.log.Warn("conntrack clean-up not queued; its entries live until they time out", "flows", add, "error", oneLine(err))
		return
	}
	a.queued = true
	a.claimRunner()
}

// forgetLeaving queues the clean-ups of leaving that may find conntrack
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
// is the runner's to forget once its flows are deleted (settleForgets),
// or forgotten here when nothing was queued for it (the node has no
// conntrack entry).
func (a *Assigner) forgetLeaving(leaving []steer.Gone, dels []nat.EgressKey) {
	var sources []netip.Addr
	for _, k := range dels {
		if !slices.Contains(sources, k.Source) && a.seen(k.Source) {
			sources = append(sources, k.Source)
		}
	}
	var had []steer.Gone
	for _, g := range leaving {
		fromSeen := slices.ContainsFunc(sources, func(s netip.Addr) bool { return s.Is4() == g.IP.Is4() })
		if !g.Target.IsValid() && fromSeen || a.seen(g.IP) {
			had = append(had, g)
		}
	}
	a.queueForget(had)
	unsee := sources
	for _, g := range had {
		if !a.queued && !g.Target.IsValid() {
			unsee = append(unsee, g.IP)
		}
	}
	a.unsee(unsee)
}

// seen says whether our rules recorded a flow of addr; a read that fails
// says yes, so that the clean-up runs.
func (a *Assigner) seen(addr netip.Addr) bool {
	ok, err := a.opts.NAT.Seen(addr)
	return err != nil || ok
}

// unsee forgets that addrs had flows. A failure only costs a later change
// a clean-up that finds nothing, so it is logged.
func (a *Assigner) unsee(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	if err := a.opts.NAT.Unsee(addrs); err != nil {
		a.log.Warn("addresses kept as having had flows; a later change cleans up for nothing", "addresses", addrs, "error", oneLine(err))
	}
}

// mergeForgets adds add to q, a pair already there moved to add's time
// with its error cleared: the clean-up it needs starts afresh.
func mergeForgets(q, add []forgetEntry) []forgetEntry {
	for _, e := range add {
		if i := slices.IndexFunc(q, e.same); i >= 0 {
			q[i] = e
			continue
		}
		q = append(q, e)
	}
	return q
}

func (a *Assigner) readForgets() ([]forgetEntry, error) {
	var q []forgetEntry
	_, err := a.st.Read(store.ConntrackFile, &q)
	return q, err
}

// Queued says whether the last call (an Add or Del) queued a conntrack
// clean-up. Its caller then takes the runner (TakeRunner) and, if it gets
// it, has a detached child Drain the queue.
func (a *Assigner) Queued() bool { return a.queued }

// ForgetPending drains the queue in this process, as GC and repair do,
// unless another runner is draining it already (that one takes what is
// queued now too). It fails when a clean-up failed; the failure is in the
// queue, for status, CHECK, GC and repair.
func (a *Assigner) ForgetPending() error {
	if a.opts.NAT == nil {
		return nil
	}
	r, err := a.TakeRunner()
	if err != nil || r == nil {
		return err
	}
	return a.Drain(r)
}

// Drain works through the queue while it holds r, the runner lock: each
// pass reads, under the state lock, the entries it has not tried yet
// (those queued meanwhile included), deletes their flows off the lock,
// then takes off the queue what was done and records what failed. Each
// entry is tried once per runner, so a failing one ends the drain; GC and
// repair retry it. It closes r, once nothing is left under the state lock.
func (a *Assigner) Drain(r *os.File) error {
	defer r.Close() // on an error: GC and repair take what stays queued
	if a.opts.NAT == nil {
		return nil
	}
	tried := map[string]bool{}
	var failed []error
	for pass := 0; ; pass++ {
		q, err := a.untried(tried, r)
		if err != nil || len(q) == 0 {
			return errors.Join(append(failed, err)...)
		}
		if pass == 0 {
			conntrackStall()
		}
		a.opts.NAT.StartPass()
		errs := make([]error, len(q))
		for i, e := range q {
			tried[e.key()] = true
			errs[i] = a.opts.NAT.Forget(e.IP, e.Target)
			if errs[i] != nil {
				a.log.Warn("conntrack clean-up failed; GC or repair retries it", "flows", e.String(), "error", oneLine(errs[i]))
			}
		}
		if err := a.settleForgets(q, errs); err != nil {
			return err
		}
		failed = append(failed, errs...)
	}
}

// untried reads, under the state lock, the queued entries this runner has
// not tried. With none it lets the runner lock go before the state lock:
// a change that queues after that finds the runner free and starts one,
// one that queued before is in what was read.
func (a *Assigner) untried(tried map[string]bool, r *os.File) ([]forgetEntry, error) {
	l, err := a.lockToRead()
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	q, err := a.readForgets()
	if err != nil {
		return nil, err
	}
	q = slices.DeleteFunc(q, func(e forgetEntry) bool { return tried[e.key()] })
	if len(q) == 0 {
		r.Close()
	}
	return q, nil
}

// pendingForgets reads the queue under the lock, none when there is no
// state.
func (a *Assigner) pendingForgets() ([]forgetEntry, error) {
	l, err := a.lockToRead()
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	return a.readForgets()
}

// settleForgets takes off the queue each entry of done that succeeded, as
// long as no later change queued its pair again, and records the errors
// of those that failed.
func (a *Assigner) settleForgets(done []forgetEntry, errs []error) error {
	l, err := a.st.Lock(store.MakeParts, a.opts.LockTimeout)
	if err != nil || l == nil {
		return err
	}
	defer l.Unlock()
	q, err := a.readForgets()
	if err != nil {
		return err
	}
	out := q[:0]
	for _, e := range q {
		i := slices.IndexFunc(done, func(d forgetEntry) bool { return d.same(e) && d.Since.Equal(e.Since) })
		switch {
		case i < 0:
		case errs[i] == nil:
			continue
		default:
			e.Error, e.Tries = oneLine(errs[i]).Error(), e.Tries+1
		}
		out = append(out, e)
	}
	a.unseeGone(done, errs)
	if len(out) == 0 {
		return a.st.Remove(store.ConntrackFile)
	}
	return a.st.Write(store.ConntrackFile, out)
}

// unseeGone forgets, under the state lock, that the external IPs whose
// flows done deleted had flows, for each that nobody holds now: no rule
// steers it, so no flow can be recorded for it meanwhile. One held again
// keeps its record, which its own new flows may have made.
func (a *Assigner) unseeGone(done []forgetEntry, errs []error) {
	var gone []netip.Addr
	for i, e := range done {
		if errs[i] != nil || e.Target.IsValid() || slices.Contains(gone, e.IP) {
			continue
		}
		if ent, err := a.st.ReadIP(e.IP); err == nil && len(ent.Holders) == 0 {
			gone = append(gone, e.IP)
		}
	}
	a.unsee(gone)
}

// overdue lists the queued clean-ups that failed or are past ForgetBound,
// for the reports; ip, when valid, keeps only that IP's.
func (a *Assigner) overdue(ip netip.Addr) ([]string, error) {
	q, err := a.readForgets()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range q {
		if ip.IsValid() && e.IP != ip {
			continue
		}
		switch {
		case e.Error != "":
			out = append(out, fmt.Sprintf("conntrack: %s not deleted after %d tries (%s); GC or repair retries", e, e.Tries, e.Error))
		case time.Since(e.Since) > ForgetBound:
			out = append(out, fmt.Sprintf("conntrack: %s not deleted since %s; GC or repair deletes them", e, e.Since.UTC().Format(time.RFC3339)))
		}
	}
	return out, nil
}

// checkForgets fails CHECK when a clean-up of one of ips is overdue: some
// of their clients may still send to a target that left.
func (a *Assigner) checkForgets(ips []netip.Addr) error {
	for _, ip := range ips {
		late, err := a.overdue(ip)
		if err != nil {
			return err
		}
		if len(late) > 0 {
			return Errorf(ErrDrift, "%s", late[0])
		}
	}
	return nil
}
