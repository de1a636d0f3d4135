package keylock

import (
	"context"
	"errors"
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

// A waiter whose context ends gives up, locking nothing; the key stays
// the holder's, and is let go whole once it unlocks.
func TestAWaiterGivesUpWhenItsContextEnds(t *testing.T) {
	var k Keyed
	unlock := k.Lock("a")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		u, err := k.LockContext(ctx, "a")
		if u != nil {
			u()
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("LockContext of a held key, its context cancelled: %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LockContext waited on for a held key after its context ended")
	}
	unlock()
	if n := k.held(); n != 0 {
		t.Errorf("%d keys kept after the waiter gave up and the holder unlocked; want 0", n)
	}
	again, err := k.LockContext(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	again()
}

// held is how many keys have a mutex now.
func (k *Keyed) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}
