package assigner

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/forget"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

func (f *fixture) queue(t *testing.T) []forget.Entry {
	t.Helper()
	a := f.assigner()
	q, err := a.queue.Pending()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func bLeft() string { return v4a.String() + "->" + ctrB4.Addr().String() }

// The walk that finds a leaving target's entries is not DEL's: DEL only
// queues it, under the lock, and ForgetPending (the detached child's, after
// the lock is released) deletes them and empties the queue.
func TestDelQueuesTheConntrackCleanUpAndForgetsNothingItself(t *testing.T) {
	f, n := twoHolders(t)
	a := f.assigner()
	if err := a.Del(attB); err != nil {
		t.Fatal(err)
	}
	if len(n.forgot) != 0 {
		t.Fatalf("DEL forgot %v itself, want the clean-up left to ForgetPending", n.forgot)
	}
	if !a.Conntrack().Queued() {
		t.Error("Queued() is false after a DEL whose target left: the plugin would start no clean-up")
	}
	if q := f.queue(t); len(q) != 1 || q[0].IP != v4a || q[0].Target != ctrB4.Addr() {
		t.Fatalf("queue after b's DEL is %+v, want b's flows to %s", q, v4a)
	}
	a.Close() // as the plugin's process ends, letting its runner lock go
	f.forget()
	if !slices.Equal(n.forgot, []string{bLeft()}) {
		t.Errorf("ForgetPending forgot %v, want %v", n.forgot, bLeft())
	}
	if _, err := os.Lstat(filepath.Join(f.stateDir(), string(store.ConntrackFile))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the queue outlived a clean-up that succeeded: %v", err)
	}
}

// With no conntrack entry on the node there is nothing to forget: no
// queue, and no child for the plugin to start.
func TestNothingIsQueuedOnANodeWithoutConntrackEntries(t *testing.T) {
	f, n := twoHolders(t)
	n.untracked = true
	a := f.assigner()
	if err := a.Del(attB); err != nil {
		t.Fatal(err)
	}
	if a.Conntrack().Queued() || len(f.queue(t)) != 0 {
		t.Errorf("queued %v (Queued %v) on a node without conntrack entries", f.queue(t), a.Conntrack().Queued())
	}
}

// A conntrack fault neither fails the DEL nor any later change; it is
// kept with its error, reported by CHECK and status, and GC retries it.
func TestAConntrackFaultIsReportedAndRetriedAndBlocksNothing(t *testing.T) {
	f, n := twoHolders(t)
	n.forgetErr = errors.New("deleting conntrack entries: operation not permitted")
	f.del(attB)
	if err := f.assigner().Conntrack().Run(); err == nil {
		t.Fatal("ForgetPending hid the fault")
	}
	q := f.queue(t)
	if len(q) != 1 || q[0].Tries != 1 || !strings.Contains(q[0].Error, "not permitted") {
		t.Fatalf("queue after the fault is %+v, want b's flows with the error and one try", q)
	}
	_, err := f.checkAs(attA, ctrA4)
	if !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), "conntrack") || !strings.Contains(err.Error(), ctrB4.Addr().String()) {
		t.Errorf("CHECK of a with b's flows not deleted: %v, want drift naming conntrack and %s", err, ctrB4.Addr())
	}
	rep, err := f.assigner().Report()
	if err != nil || !slices.ContainsFunc(rep.Drift, func(d string) bool { return strings.Contains(d, "not permitted") }) {
		t.Errorf("status drift %v (%v), want the failed clean-up with its error", rep.Drift, err)
	}
	f.steered(n, traffic.Both, ctrC4)
	f.add(attC, v4a) // the next changes go through
	f.del(attC)
	n.forgetErr = nil
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if q := f.queue(t); len(q) != 0 {
		t.Errorf("GC left %+v queued once conntrack works again", q)
	}
	if !slices.Contains(n.forgot, bLeft()) {
		t.Errorf("GC did not retry b's flows: forgot %v", n.forgot)
	}
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after GC's retry: %v", err)
	}
}

// A clean-up that read the queue before a later change queued the same
// pair again (the target came back and left again) must not take the
// later one off: new flows may have reached the target in between.
func TestACleanUpLeavesAPairQueuedAgainMeanwhile(t *testing.T) {
	f, _ := twoHolders(t)
	f.del(attB)
	a := f.assigner()
	read, err := a.queue.Pending()
	if err != nil || len(read) != 1 {
		t.Fatalf("queue %+v, %v", read, err)
	}
	f.steered(f.opts.NAT.(*fakeNAT), traffic.Both, ctrB4)
	f.add(attB, v4a)
	f.del(attB)
	if err := a.queue.Settle(read, []error{nil}); err != nil {
		t.Fatal(err)
	}
	if q := f.queue(t); len(q) != 1 || q[0].Since.Equal(read[0].Since) {
		t.Errorf("queue %+v after settling the earlier read, want the later queuing kept", q)
	}
}

// duringForget runs during, once, from inside the first Forget: a change
// made while a runner walks.
type duringForget struct {
	*fakeNAT
	during func()
}

func (d *duringForget) Forget(ip, target netip.Addr) error {
	if f := d.during; f != nil {
		d.during = nil
		f()
	}
	return d.fakeNAT.Forget(ip, target)
}

// One runner per state directory: while it holds the runner lock, a DEL
// that queues finds it taken (and the plugin starts no child); the
// runner drains what was queued meanwhile before it lets go, and once it
// has, the next DEL takes it.
func TestOneRunnerDrainsWhatOthersQueueWhileItRuns(t *testing.T) {
	f, n := twoHolders(t)
	f.del(attB)
	var other *os.File
	d := &duringForget{fakeNAT: n, during: func() {
		a := f.assigner()
		if err := a.Del(attA); err != nil {
			t.Fatal(err)
		}
		r, err := a.Conntrack().TakeRunner()
		if err != nil || r != nil {
			t.Errorf("a DEL during the drain took the runner lock (%v, %v), want it left to the running one", r, err)
		}
		other = r
	}}
	f.opts.NAT = d
	a := f.assigner()
	r, err := a.Conntrack().TakeRunner()
	if err != nil || r == nil {
		t.Fatalf("TakeRunner with b's clean-up queued and no runner: %v, %v", r, err)
	}
	if err := a.Conntrack().Drain(r); err != nil {
		t.Fatal(err)
	}
	if other != nil {
		other.Close()
	}
	if want := []string{bLeft(), v4a.String() + "->invalid IP"}; !slices.Equal(n.forgot, want) {
		t.Errorf("the runner forgot %v, want b's and then a's, queued while it ran: %v", n.forgot, want)
	}
	// a's entry was queued after the first pass's walks: it needs a pass
	// of its own, whose walks are fresh.
	if want := []int{0, 1}; !slices.Equal(n.passes, want) {
		t.Errorf("passes began after %v forgets, want %v: one before b's, one before a's", n.passes, want)
	}
	if q := f.queue(t); len(q) != 0 {
		t.Errorf("queue %+v after the drain, want it empty", q)
	}
	f.opts.NAT = n
	f.add(attA, v4a)
	f.del(attA)
	r, err = f.assigner().Conntrack().TakeRunner()
	if err != nil || r == nil {
		t.Fatalf("TakeRunner after the drain ended: %v, %v, want the lock free", r, err)
	}
	r.Close()
}

// A failing clean-up is tried once by a runner, which then ends (GC and
// repair retry it), rather than spinning on it.
func TestARunnerTriesAFailingCleanUpOnceAndEnds(t *testing.T) {
	f, n := twoHolders(t)
	n.forgetErr = errors.New("deleting conntrack entries: operation not permitted")
	f.del(attB)
	if err := f.assigner().Conntrack().Run(); err == nil {
		t.Fatal("ForgetPending hid the fault")
	}
	if len(n.forgot) != 1 {
		t.Errorf("the runner tried %v, want one try", n.forgot)
	}
}

// Nothing queued, nothing to run: GC's ForgetPending makes no runner
// lock in the state directory.
func TestNoRunnerIsTakenWithNothingQueued(t *testing.T) {
	f, _ := twoHolders(t)
	r, err := f.assigner().Conntrack().TakeRunner()
	if err != nil || r != nil {
		t.Fatalf("TakeRunner with an empty queue: %v, %v", r, err)
	}
	if _, err := os.Lstat(filepath.Join(f.stateDir(), string(store.RunnerFile))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runner lock was made with nothing queued: %v", err)
	}
}

// A DEL that queued takes the runner lock under the state lock it already
// holds: handing it over (TakeRunner) takes no second round of the state
// lock, so it succeeds while another invocation holds that lock.
func TestTakeRunnerAfterAQueueingDelNeedsNoStateLock(t *testing.T) {
	f, _ := twoHolders(t)
	a := f.assigner()
	if err := a.Del(attB); err != nil {
		t.Fatal(err)
	}
	other := f.assigner()
	l, err := other.st.Lock(store.MakeParts, time.Second)
	if err != nil || l == nil {
		t.Fatalf("taking the state lock as another invocation: %v", err)
	}
	defer l.Unlock()
	a.opts.LockTimeout = 20 * time.Millisecond
	r, err := a.Conntrack().TakeRunner()
	if err != nil || r == nil {
		t.Fatalf("TakeRunner while another invocation holds the state lock = %v, %v; want the runner lock the DEL claimed", r, err)
	}
	defer r.Close()
	if again, err := other.st.TryFlock(store.RunnerFile); err != nil || again != nil {
		t.Errorf("the runner lock is free after TakeRunner handed it over (%v, %v)", again, err)
	}
}

// A runner lock claimed by a change whose caller never took it is let go
// by the next call on the same Assigner, not kept for the process's life.
func TestAClaimedRunnerIsLetGoByTheNextCall(t *testing.T) {
	f, _ := twoHolders(t)
	a := f.assigner()
	if err := a.Del(attB); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Report(); err != nil {
		t.Fatal(err)
	}
	b := f.assigner()
	l, err := b.st.Lock(store.ReadOnly, time.Second)
	if err != nil || l == nil {
		t.Fatalf("taking the state lock: %v", err)
	}
	defer l.Unlock()
	r, err := b.st.TryFlock(store.RunnerFile)
	if err != nil || r == nil {
		t.Fatalf("runner lock after the next call = %v, %v; want it free", r, err)
	}
	r.Close()
}

// Our rules record an external IP before they DNAT a flow to it, and a
// container address as they SNAT its flow (nat.Table.Seen): a DEL whose
// IP and container were never recorded queues no clean-up (the plugin
// starts no runner); one whose container SNATed a flow queues the IP's,
// and forgets the container's address once the queue is written.
func TestADelQueuesACleanUpOnlyForFlowsOurRulesRecorded(t *testing.T) {
	f, n := twoHolders(t)
	n.neverSeen = map[netip.Addr]bool{v4a: true, ctrA4.Addr(): true, ctrB4.Addr(): true}
	a := f.assigner()
	if err := a.Del(attB); err != nil {
		t.Fatal(err)
	}
	if a.Conntrack().Queued() || len(f.queue(t)) != 0 {
		t.Fatalf("b's DEL queued %+v for an IP that never had a flow", f.queue(t))
	}
	if len(n.unseen) != 0 {
		t.Errorf("b's DEL forgot %v, which were never recorded", n.unseen)
	}
	delete(n.neverSeen, ctrA4.Addr()) // a's container SNATed a flow to the IP
	a = f.assigner()
	if err := a.Del(attA); err != nil {
		t.Fatal(err)
	}
	if q := f.queue(t); !a.Conntrack().Queued() || len(q) != 1 || q[0].IP != v4a || q[0].Target.IsValid() {
		t.Fatalf("a's DEL queued %+v, want every flow of %s (its container SNATed one)", q, v4a)
	}
	if !slices.Equal(n.unseen, []netip.Addr{ctrA4.Addr()}) {
		t.Errorf("a's DEL forgot %v, want a's container address alone (the IP is the runner's)", n.unseen)
	}
	a.Close()
	f.forget()
	if !slices.Equal(n.unseen, []netip.Addr{ctrA4.Addr(), v4a}) {
		t.Errorf("after the clean-up the forgotten addresses are %v, want the IP too: nobody holds it", n.unseen)
	}
}
