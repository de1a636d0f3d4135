package assigner

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
)

// ipPool is overlapping IPv4 and IPv6 IPs that random workers fight over.
func ipPool() []netip.Addr {
	var pool []netip.Addr
	for i := 11; i <= 16; i++ {
		pool = append(pool,
			netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", i)),
			netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i)))
	}
	return pool
}

// randomOps runs ops random ADDs and DELs of a worker's own attachments
// and returns what they should hold afterwards. Each worker owns its
// attachments, so its expectation does not depend on the others.
func randomOps(rng *rand.Rand, worker, ops int, pool []netip.Addr, run func(op string, att Attachment, ips []netip.Addr) error) (holdings, error) {
	mine := holdings{}
	for range ops {
		att := Attachment{Network: "net1", ContainerID: fmt.Sprintf("w%d-c%d", worker, rng.IntN(3)), IfName: "eth0"}
		if rng.IntN(3) == 0 {
			if err := run("del", att, nil); err != nil {
				return mine, fmt.Errorf("worker %d: Del(%s): %w", worker, att, err)
			}
			delete(mine, att)
			continue
		}
		ips := slices.Clone(pool)
		rng.Shuffle(len(ips), func(i, j int) { ips[i], ips[j] = ips[j], ips[i] })
		ips = ips[:1+rng.IntN(3)]
		if err := run("add", att, ips); err != nil {
			return mine, fmt.Errorf("worker %d: Add(%s, %v): %w", worker, att, ips, err)
		}
		mine[att] = ips
	}
	return mine, nil
}

func merge(all []holdings) holdings {
	out := holdings{}
	for _, h := range all {
		for att, ips := range h {
			out[att] = ips
		}
	}
	return out
}

func TestConcurrentAddsAndDelsLeaveTheHolderCarryingExactlyTheHeldIPs(t *testing.T) {
	const workers, ops = 16, 50
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	f := newFixture(t)
	pool := ipPool()

	// Announce runs under the lock, so every IP announced must be on the
	// holder then, whatever the other invocations are doing.
	var hookErrs sync.Map
	f.probing()
	ann := hooks{
		probe: func(announce.Target) error { return nil },
		announce: func(ps []announce.Target) error {
			on := f.holderAddrs()
			for _, p := range ps {
				if !slices.Contains(on, p.Addr) {
					hookErrs.Store(fmt.Sprintf("announce of %s", p.Addr), "it is not on the holder while being announced")
				}
			}
			return nil
		},
	}

	results := make([]holdings, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			results[w], errs[w] = randomOps(rng, w, ops, pool, func(op string, att Attachment, ips []netip.Addr) error {
				a := f.assigner()
				if op == "del" {
					return a.Del(att)
				}
				_, err := a.Add(att, ips, ann)
				return err
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent invocations failed (seed %d):\n%v", seed, err)
	}
	hookErrs.Range(func(k, v any) bool {
		t.Errorf("%s: %s", k, v)
		return true
	})

	want := merge(results)
	assertState(t, f, want)
	if n := f.k.count("holderAddrs"); n != 0 {
		t.Errorf("ADD and DEL listed the holder's addresses %d times", n)
	}

	for att := range want {
		f.del(att)
	}
	assertState(t, f, holdings{})
	if got := f.holderAddrs(); len(got) != 0 {
		t.Errorf("after deleting every attachment the holder still carries %v", got)
	}
}

func TestLockTimeoutWhileAnotherInvocationHoldsTheLock(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		a := f.assigner()
		a.step = func(step string) {
			if step == "record" {
				close(holding)
				<-release
			}
		}
		_, err := a.Add(attA, []netip.Addr{v4b}, nil)
		done <- err
	}()
	<-holding

	impatient := *f
	impatient.opts.LockTimeout = 100 * time.Millisecond
	ops := map[string]func(a *Assigner) error{
		"Add":   addOp(attC, v4c),
		"Del":   delOp(attB),
		"Check": func(a *Assigner) error { _, err := a.Check(attB); return err },
		"GC":    func(a *Assigner) error { return a.GC("net2", nil) },
	}
	for name, op := range ops {
		start := time.Now()
		err := op(impatient.assigner())
		took := time.Since(start)
		if !errors.Is(err, ErrLockTimeout) {
			t.Errorf("%s while the lock is held = %v, want ErrLockTimeout", name, err)
		}
		if took < 100*time.Millisecond || took > 2*time.Second {
			t.Errorf("%s gave up after %v, want about the 100ms lock timeout", name, took)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the invocation holding the lock: %v", err)
	}
	assertState(t, f, holdings{attA: {v4b}, attB: {v4a}})
}

// TestAddAcceptsAnIPAnotherInvocationPutOnTheHolderItJustMade covers the
// first ADDs on a fresh node: one invocation finds no holder, then, before
// it looks the IP up, another creates the holder and puts the same IP on
// it. The IP is then local to our own holder, not to another interface.
func TestAddAcceptsAnIPAnotherInvocationPutOnTheHolderItJustMade(t *testing.T) {
	f := newFixture(t)
	raced := false
	f.k.setAfter(func(method string) {
		if method == "lookupHolder" && !raced {
			raced = true
			f.add(attB, v4a)
		}
	})
	if _, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil); err != nil {
		t.Fatalf("Add of an IP that a concurrent ADD just put on the new holder: %v", err)
	}
	if !raced {
		t.Fatalf("the concurrent ADD never ran")
	}
	f.k.setAfter(nil)
	assertState(t, f, holdings{attA: {v4a}, attB: {v4a}})
}
