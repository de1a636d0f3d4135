package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
)

// allSteps are the named steps of a change; a crash may come after any.
var allSteps = []string{"journal", "record", "index", "address", "device", "done"}

// holding is one ADD of a setup, in order.
type holding struct {
	att Attachment
	ips []netip.Addr
}

type crashScenario struct {
	name  string
	setup []holding
	op    func(a *Assigner) error
	// fails says op ends in an error even without a crash.
	fails bool
	// adds says op is an ADD: killed once its journal is written, it is
	// rolled back to what was held before.
	adds bool
	// post is what is held once op has run.
	post holdings
}

func addOp(att Attachment, ips ...netip.Addr) func(a *Assigner) error {
	return func(a *Assigner) error { _, err := a.Add(att, ips, nil); return err }
}

func delOp(att Attachment) func(a *Assigner) error {
	return func(a *Assigner) error { return a.Del(att) }
}

var errAnnounce = errors.New("sendto: network is down")

var crashScenarios = []crashScenario{
	{
		name: "add new on a fresh host",
		op:   addOp(attA, v4a, v6a),
		adds: true,
		post: holdings{attA: {v4a, v6a}},
	},
	{
		name:  "add new beside another holder",
		setup: []holding{{attB, []netip.Addr{v4a, v6b}}},
		op:    addOp(attA, v4a, v6a, v4b),
		adds:  true,
		post:  holdings{attA: {v4a, v6a, v4b}, attB: {v4a, v6b}},
	},
	{
		name:  "add re-add with a different set",
		setup: []holding{{attB, []netip.Addr{v4c}}, {attA, []netip.Addr{v4a, v6a, v4c}}},
		op:    addOp(attA, v6a, v4b, v6b),
		adds:  true,
		post:  holdings{attA: {v6a, v4b, v6b}, attB: {v4c}},
	},
	{
		name:  "add whose announcement fails and is rolled back",
		setup: []holding{{attB, []netip.Addr{v4a}}},
		op: func(a *Assigner) error {
			_, err := a.Add(attA, []netip.Addr{v4a, v4b, v6a}, hooks{announce: func([]announce.Target) error { return errAnnounce }})
			return err
		},
		fails: true,
		adds:  true,
		post:  holdings{attB: {v4a}},
	},
	{
		name:  "del of a holder sharing its IPs",
		setup: []holding{{attA, []netip.Addr{v4a, v6a, v4b}}, {attB, []netip.Addr{v4a, v6a}}},
		op:    delOp(attA),
		post:  holdings{attB: {v4a, v6a}},
	},
	{
		name:  "del of the last holder",
		setup: []holding{{attA, []netip.Addr{v4a, v6a}}},
		op:    delOp(attA),
		post:  holdings{},
	},
	{
		name:  "gc dropping an unlisted record",
		setup: []holding{{attA, []netip.Addr{v4a, v6a}}, {attB, []netip.Addr{v4a}}, {attC, []netip.Addr{v4b}}},
		op:    func(a *Assigner) error { return a.GC("net1", []Attachment{attB}) },
		post:  holdings{attB: {v4a}, attC: {v4b}},
	},
}

func (s crashScenario) prepare(t *testing.T) (*fixture, holdings) {
	t.Helper()
	f := newFixture(t)
	return f, s.setupOn(f)
}

// setupOn makes the scenario's holdings on f and returns them.
func (s crashScenario) setupOn(f *fixture) holdings {
	f.t.Helper()
	pre := holdings{}
	for _, h := range s.setup {
		f.add(h.att, h.ips...)
		pre[h.att] = h.ips
	}
	return pre
}

// steps runs the scenario once without a crash and returns the steps it
// passed, in order.
func (s crashScenario) steps(t *testing.T) []string {
	t.Helper()
	f, _ := s.prepare(t)
	var steps []string
	a := f.assigner()
	a.step = func(step string) { steps = append(steps, step) }
	if err := s.op(a); (err != nil) != s.fails {
		t.Fatalf("%s without a crash: error %v, want an error: %v", s.name, err, s.fails)
	}
	assertState(t, f, s.post)
	return steps
}

// expect is what must be held after a crash at step n and then an
// invocation that repeats op, or does something else and so only replays
// the journal. Before the journal is written the change never happened;
// after it, an ADD is rolled back (its runtime saw it fail: the attachment
// keeps what it held before) and a release is finished. Repeating an op
// that fails changes nothing, so it leaves what the replay left.
func (s crashScenario) expect(steps []string, n int, repeats bool, pre holdings) holdings {
	switch {
	case repeats && !s.fails:
		return s.post
	case n <= slices.Index(steps, "journal"):
		return pre
	case s.adds:
		return pre
	}
	return s.post
}

// crash is what the step function panics with, standing for a process killed there.
type crash struct{ step string }

// crashHows are the two ways a test kills an invocation mid-change: a
// panic unwinding the stack, or runtime.Goexit ending its goroutine. Either
// way the deferred unlock runs, as the kernel drops the flock of a dead
// process, and nothing in the assigner may carry on from half a change.
var crashHows = []string{"panic", "goexit"}

// runCrashing runs op, killing it at its n-th step (counting from 0), and
// returns the step it died at, "" if it finished.
func runCrashing(a *Assigner, op func(*Assigner) error, n int, how string) (crashedAt string) {
	seen := 0
	a.step = func(step string) {
		if seen == n {
			crashedAt = step
			if how == "goexit" {
				runtime.Goexit()
			}
			panic(crash{step})
		}
		seen++
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crash); !ok {
					panic(r)
				}
			}
		}()
		op(a)
	}()
	<-done
	return crashedAt
}

func TestCrashAtAnyStepIsRepairedByTheNextInvocation(t *testing.T) {
	stranger := Attachment{Network: "net9", ContainerID: "nobody", IfName: "eth0"}
	reached := map[string]bool{}
	for _, s := range crashScenarios {
		steps := s.steps(t)
		for _, st := range steps {
			reached[st] = true
		}
		for n, step := range steps {
			nexts := []struct {
				name string
				op   func(a *Assigner) error
				// repeats says the next invocation is op again, rather than
				// one that only replays the journal.
				repeats bool
			}{
				{"the same operation again", s.op, true},
				{"a DEL of an unknown attachment", delOp(stranger), false},
			}
			for _, next := range nexts {
				for _, how := range crashHows {
					name := fmt.Sprintf("%s/%s at %s (step %d)/then %s", s.name, how, step, n+1, next.name)
					t.Run(name, func(t *testing.T) {
						f, pre := s.prepare(t)
						if got := runCrashing(f.assigner(), s.op, n, how); got != step {
							t.Fatalf("crashed at %q, want %q: the steps are not deterministic", got, step)
						}
						// A crash at a "journal" step comes before that journal is written.
						if step != "journal" {
							if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) {
								t.Errorf("CHECK during an interrupted change = %v, want ErrDrift", err)
							}
						}

						err := next.op(f.assigner())
						if err != nil && !(next.repeats && s.fails && errors.Is(err, errAnnounce)) {
							t.Fatalf("the invocation after the crash: %v", err)
						}
						assertState(t, f, s.expect(steps, n, next.repeats, pre))
					})
				}
			}
		}
	}
	for _, step := range allSteps {
		if !reached[step] {
			t.Errorf("no scenario passes step %q, so a crash there is untested", step)
		}
	}
}

func TestCrashLeavesStateThatCheckCallsDriftUntilRepaired(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	if got := runCrashing(f.assigner(), addOp(attA, v4a, v4b), 3, "panic"); got == "" {
		t.Fatalf("the ADD did not reach its fourth step")
	}
	if _, err := f.assigner().Check(attB); !errors.Is(err, ErrDrift) {
		t.Errorf("CHECK of an unrelated attachment during an interrupted change = %v, want ErrDrift", err)
	}
	if err := f.assigner().GC("net1", []Attachment{attA, attB}); err != nil {
		t.Fatalf("GC after the crash: %v", err)
	}
	// GC rolls the interrupted ADD back before it looks at the records.
	assertState(t, f, holdings{attB: {v4a}})
	if !slices.Equal(f.holderAddrs(), []netip.Addr{v4a}) {
		t.Errorf("holder carries %v after GC repaired the crash", f.holderAddrs())
	}
}
