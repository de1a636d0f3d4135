package assigner

import (
	"os"

	"github.com/external-ip/external-ip/pkg/forget"
)

// The conntrack clean-up of the targets that left, off the lock: the
// calls' side of package forget's queue.

// conntrack is the clean-up's side of the NAT, nil when nothing is
// steered (and nothing is cleaned up).
func (a *Assigner) conntrack() forget.Conntrack {
	if a.opts.NAT == nil {
		return nil
	}
	return a.opts.NAT
}

// Queued says whether the last call (an Add or Del) queued a conntrack
// clean-up. Its caller then takes the runner (TakeRunner) and, if it gets
// it, has a detached child Drain the queue.
func (a *Assigner) Queued() bool { return a.queue.Queued() }

// TakeRunner takes the runner lock when the queue has an entry and no
// other runner holds it; nil otherwise (or with no state). After a call
// that queued, it hands over what the call claimed (forget.Queue).
func (a *Assigner) TakeRunner() (*os.File, error) { return a.queue.TakeRunner() }

// Drain works through the queue while it holds r, the runner lock
// (forget.Queue.Drain), and closes r.
func (a *Assigner) Drain(r *os.File) error { return a.queue.Drain(r) }

// ForgetPending drains the queue in this process, as GC and repair do,
// unless another runner is draining it already (that one takes what is
// queued now too). It fails when a clean-up failed; the failure is in the
// queue, for status, CHECK, GC and repair.
func (a *Assigner) ForgetPending() error { return a.queue.Run() }

// dropRunner lets go of a runner lock the last call claimed and nobody
// took: the queue then waits for the next change that queues, GC or
// repair, as when a runner dies.
func (a *Assigner) dropRunner() {
	if a.queue != nil {
		a.queue.Drop()
	}
}
