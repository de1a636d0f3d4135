package main

import (
	"fmt"
	"time"
)

// concRow is K concurrent ADDs against K serial ones.
type concRow struct {
	k          int
	serial     []time.Duration // total wall time of K serial ADDs, per repetition
	concurrent []time.Duration // wall time from the first fork to the last exit
	lat        []time.Duration // latency of each ADD among K concurrent, every repetition
	fails      int
	errs       []string
}

func (r *concRow) fail(err error) {
	if err == nil {
		return
	}
	r.fails++
	if len(r.errs) < 3 {
		r.errs = append(r.errs, err.Error())
	}
	logf("FAIL concurrency K=%d: %v", r.k, err)
}

// concurrency runs, for each K, K ADDs of distinct attachments and IPs at
// once and K one after the other, alternating which goes first, then their
// DELs; every failure counts, DELs included.
func (b *bench) concurrency(n *node) ([]concRow, error) {
	var rows []concRow
	for k := 1; k <= b.opts.concMax; k *= 2 {
		rows = append(rows, concRow{k: k})
	}
	for rep := range b.opts.concReps {
		for ki := range rows {
			b.concOnce(n, &rows[ki], ki, rep)
		}
		last := rows[len(rows)-1]
		logf("concurrency repetition %d/%d: K=%d concurrent %s, serial %s", rep+1, b.opts.concReps, last.k,
			ms(last.concurrent[len(last.concurrent)-1]), ms(last.serial[len(last.serial)-1]))
	}
	return rows, nil
}

// concOnce is one repetition of one K: concurrent and serial, in an order
// that alternates with the repetition.
func (b *bench) concOnce(n *node, r *concRow, ki, rep int) {
	calls := func(mode, verb string) []call {
		cs := make([]call, r.k)
		for i := range cs {
			ip := fmt.Sprintf("198.19.%d.%d", 128+ki, i+1)
			cs[i] = b.eipCall(b.bins["external-ip"].path, verb, n, fmt.Sprintf("%s-%d-%d-%d", mode, r.k, rep, i), ip, nil)
		}
		return cs
	}
	concurrent := func() {
		wall, samples := b.together(n, calls("conc", "ADD"))
		r.concurrent = append(r.concurrent, wall)
		for _, s := range samples {
			r.fail(s.err)
			r.lat = append(r.lat, s.wall)
		}
		_, dels := b.together(n, calls("conc", "DEL"))
		for _, s := range dels {
			r.fail(s.err)
		}
	}
	serial := func() {
		r.serial = append(r.serial, b.serial(n, calls("ser", "ADD"), calls("ser", "DEL"), r.fail))
	}
	first, second := concurrent, serial
	if (rep+ki)%2 != 0 {
		first, second = serial, concurrent
	}
	settle()
	first()
	settle()
	second()
}

// settle waits for the detached announcers of earlier ADDs to exit (they
// live about 100 ms with announce.count 1), so that each half starts on an
// idle machine rather than on the exits of the previous burst.
func settle() { time.Sleep(150 * time.Millisecond) }

// serial runs adds one after the other from one thread in n and returns
// their total wall time, then runs dels.
func (b *bench) serial(n *node, adds, dels []call, fail func(error)) time.Duration {
	var total time.Duration
	n.ns.Do(func(nsNetNS) error {
		t0 := time.Now()
		for _, c := range adds {
			fail(b.exec(c).err)
		}
		total = time.Since(t0)
		for _, c := range dels {
			fail(b.exec(c).err)
		}
		return nil
	})
	return total
}

// coldRow is K concurrent first ADDs on a node that has no holder device
// yet: the first pods of a freshly booted node, started in a burst.
type coldRow struct {
	k     int
	walls []time.Duration
	fails int
	runs  int
	errs  []string
}

func (b *bench) coldBurst(reps int) (*coldRow, error) {
	k := b.opts.concMax
	r := &coldRow{k: k}
	bin := b.bins["external-ip"].path
	for rep := range reps {
		n, err := b.newNode(fmt.Sprintf("cold%d", rep))
		if err != nil {
			return nil, err
		}
		calls := make([]call, k)
		for i := range calls {
			calls[i] = b.eipCall(bin, "ADD", n, fmt.Sprintf("cold-%d-%d", rep, i), fmt.Sprintf("198.19.200.%d", i+1), nil)
		}
		wall, out := b.together(n, calls)
		r.walls = append(r.walls, wall)
		r.runs += k
		for _, s := range out {
			if s.err != nil {
				r.fails++
				if len(r.errs) < 3 {
					r.errs = append(r.errs, s.err.Error())
				}
			}
		}
		logf("cold burst %d/%d: %d concurrent first ADDs on a node without eip0: %s, %d failed", rep+1, reps, k, ms(wall), r.fails)
		b.dropNode(n)
	}
	return r, nil
}

// together starts every call at once, as a shell's `a & b & wait` does: one
// thread in n forks them back to back and collects each as it exits. It
// returns the time from the first fork to the last exit.
func (b *bench) together(n *node, calls []call) (time.Duration, []sample) {
	out := make([]sample, len(calls))
	var total time.Duration
	err := n.ns.Do(func(nsNetNS) error {
		t0 := time.Now()
		b.launch(len(calls), len(calls), func(i int) call { return calls[i] }, func(i int, s sample) {
			out[i] = s
			total = time.Since(t0)
		})
		return nil
	})
	if err != nil {
		for i := range out {
			out[i].err = err
		}
	}
	return total, out
}
