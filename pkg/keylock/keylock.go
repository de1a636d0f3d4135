// Package keylock is a mutex per key (a claim's owner, an attachment):
// callers of one key wait for each other, callers of two keys do not, and
// a key's mutex is dropped once nobody holds or waits for it. It is a
// leaf: it knows nothing of what the keys name.
package keylock

import "sync"

// Keyed is a mutex per key; its zero value is ready.
type Keyed struct {
	mu   sync.Mutex
	keys map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// Lock locks key's mutex, and returns what unlocks it.
func (k *Keyed) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*keyLock{}
	}
	l := k.keys[key]
	if l == nil {
		l = &keyLock{}
		k.keys[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.keys, key)
		}
		k.mu.Unlock()
	}
}
