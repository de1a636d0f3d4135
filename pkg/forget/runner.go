package forget

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
// drains (Drain) or hands the file to a child that does. After a call
// that queued, it hands over what Add claimed, without a second round of
// the state lock.
func (q *Queue) TakeRunner() (*os.File, error) {
	if c := q.claim; c != nil {
		q.claim = nil
		return c.r, nil
	}
	l, err := q.st.Lock(store.ReadOnly, q.lockTimeout)
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Unlock()
	if entries, err := q.read(); err != nil || len(entries) == 0 {
		return nil, err
	}
	return q.st.TryFlock(store.RunnerFile)
}

// claimRunner tries the runner lock once a change has queued, under the
// state lock it holds (one openat and one flock): the queue has an entry,
// so TakeRunner need not take the state lock again to read it. Held by
// another runner, it stays that one's: it reads the queue again, under
// the state lock, before it lets go (untried), and finds this entry. An
// error leaves it to TakeRunner's own round.
func (q *Queue) claimRunner() {
	if q.claim != nil {
		return
	}
	r, err := q.st.TryFlock(store.RunnerFile)
	if err != nil {
		return
	}
	q.claim = &claimed{r}
}

// Drop lets go of a runner lock claimed but never taken (a call
// whose caller did not start a clean-up): the queue then waits for the
// next change that queues, GC or repair, as when a runner dies.
func (q *Queue) Drop() {
	if q.claim != nil && q.claim.r != nil {
		q.claim.r.Close()
	}
	q.claim = nil
}
