package assigner

import "github.com/external-ip/external-ip/pkg/forget"

// Conntrack is the conntrack clean-up queue as the last call left it
// (package forget): whether an Add or Del queued a clean-up (Queued), the
// runner lock it claimed (TakeRunner), and the drain a runner does
// (Drain, Run). GC and Repair run it themselves, off the lock.
func (a *Assigner) Conntrack() *forget.Queue { return a.queue }

// dropRunner lets go of a runner lock the last call claimed and nobody
// took: the queue then waits for the next change that queues, GC or
// repair, as when a runner dies.
func (a *Assigner) dropRunner() {
	if a.queue != nil {
		a.queue.Drop()
	}
}
