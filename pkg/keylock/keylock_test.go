package keylock

import (
	"testing"
	"time"
)

func TestOneKeyWaitsForItselfAndNotForAnother(t *testing.T) {
	var k Keyed
	unlockA := k.Lock("a")
	unlockB := k.Lock("b") // another key: no wait
	got := make(chan struct{})
	go func() { k.Lock("a")(); close(got) }()
	select {
	case <-got:
		t.Fatal("a second Lock of a key held went on before its Unlock")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a Lock waiting for a key was not let go by its Unlock")
	}
	unlockB()
	if n := k.held(); n != 0 {
		t.Errorf("%d keys kept after every Unlock; want 0", n)
	}
}

// held is how many keys have a mutex now.
func (k *Keyed) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}
