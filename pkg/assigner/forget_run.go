package assigner

import (
	"os"

	"github.com/external-ip/external-ip/pkg/store"
)

// The runner lock (store.RunnerFile): whoever holds an exclusive flock on
// it drains the conntrack queue. It is taken without waiting: a change
// that finds it held leaves its entry to the runner, which reads the
// queue again before it lets go (untried). The kernel drops it when the
// runner dies; what it had not finished stays queued, for the next change
// that queues, GC or repair.

// TakeRunner takes the runner lock when the queue has an entry and no
// other runner holds it; nil otherwise (or with no state). The caller
// drains (Drain) or hands the file to a child that does.
func (a *Assigner) TakeRunner() (*os.File, error) {
	l, err := a.lockToRead()
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	if q, err := a.readForgets(); err != nil || len(q) == 0 {
		return nil, err
	}
	return a.st.TryFlock(store.RunnerFile)
}
