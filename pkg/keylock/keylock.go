// Package keylock is a mutex per key (a claim's owner, an attachment):
// callers of one key wait for each other, callers of two keys do not, and
// a key's mutex is dropped once nobody holds or waits for it. It is a
// leaf: it knows nothing of what the keys name.
package keylock

import (
	"context"
	"sync"
)

// Keyed is a mutex per key; its zero value is ready.
type Keyed struct {
	mu   sync.Mutex
	keys map[string]*keyLock
}

// keyLock is one key's mutex: a token in a channel of one, so that a
// waiter can give up when its context ends (sync.Mutex cannot).
type keyLock struct {
	token chan struct{}
	users int
}

// Lock locks key's mutex, and returns what unlocks it.
func (k *Keyed) Lock(key string) (unlock func()) {
	unlock, _ = k.LockContext(context.Background(), key)
	return unlock
}

// LockContext is Lock that gives up when ctx ends first, with ctx's error
// and nothing locked: a loop that ends with its process must not wait for
// a key that a call under way holds until its own deadline.
func (k *Keyed) LockContext(ctx context.Context, key string) (unlock func(), err error) {
	l := k.use(key)
	select {
	case l.token <- struct{}{}:
	case <-ctx.Done():
		k.drop(key, l)
		return nil, ctx.Err()
	}
	return func() {
		<-l.token
		k.drop(key, l)
	}, nil
}

func (k *Keyed) use(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]*keyLock{}
	}
	l := k.keys[key]
	if l == nil {
		l = &keyLock{token: make(chan struct{}, 1)}
		k.keys[key] = l
	}
	l.users++
	return l
}

func (k *Keyed) drop(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(k.keys, key)
	}
}
