package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// concurrentHeld is how many IPv4 attachments the busy node holds before
// the concurrent ADDs.
const concurrentHeld = 1000

// concurrency measures, on the conntrack node (its -conntrack entries of
// each family) once it also holds concurrentHeld attachments, K ADDs of
// new attachments run all at once against the same K run one after the
// other, for each K up to -concurrent, and then their DELs alike: wall
// time of the batch, each call's p50 and max, and failures (a lock not
// had within lockTimeout is code 11). Each row prints once, after the
// iterations; the ratio is concurrent wall over serial wall, stated with
// the run's regime.
func (b *bench) concurrency(n *node, regime string) error {
	if b.opts.concurrent == 0 {
		return nil
	}
	if err := b.fill(n, concurrentHeld, false); err != nil {
		return err
	}
	fmt.Printf("\nconcurrent against serial on %s (%d conntrack entries of each family, %d held); %s\n", n.name, b.opts.conntrack, concurrentHeld, regime)
	fmt.Printf("%-4s %-4s %10s %10s %7s %9s %9s %6s\n", "verb", "K", "serial", "concurrent", "ratio", "p50 conc", "max conc", "fails")
	s := 240 // scenarioIP puts s in an IPv4 octet
	for _, k := range batchSizes(b.opts.concurrent) {
		// Each verb's serial batch is undone, unmeasured, before its
		// concurrent one: the ADDs' leave the attachments for the DELs.
		for _, verb := range []string{"ADD", "DEL"} {
			undo := map[string]string{"ADD": "DEL", "DEL": "ADD"}[verb]
			serial, _, sf := b.batch(n, s, k, verb, 1)
			b.batch(n, s, k, undo, 1)
			conc, lat, cf := b.batch(n, s, k, verb, k)
			fmt.Printf("%-4s %-4d %10s %10s %7.2f %9s %9s %6d\n", verb, k, ms(serial), ms(conc), float64(conc)/float64(serial), ms(lat[len(lat)/2]), ms(lat[len(lat)-1]), sf+cf)
		}
		s++
	}
	return nil
}

// batchSizes are the K of the concurrent rows: 8, 16, 32 and 64 up to
// most, and most itself, so that a short try (-concurrent 4) runs a row.
func batchSizes(most int) []int {
	var out []int
	for _, k := range []int{8, 16, 32, 64} {
		if k < most {
			out = append(out, k)
		}
	}
	if most > 0 {
		out = append(out, most)
	}
	return out
}

// batch runs verb for k attachments of scenario s with inFlight calls at
// a time, and returns the batch's wall time, each call's sorted, and the
// failures.
func (b *bench) batch(n *node, s, k int, verb string, inFlight int) (time.Duration, []time.Duration, int) {
	settle(n)
	lat := make([]time.Duration, k)
	errs := make([]error, k)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range k {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			key := 2_000_000 + s*100 + i
			x := b.execIn(n, b.eipCall(b.bins["external-ip"], verb, n, key, b.defaultTraffic(), scenarioIP(s, i, false)))
			lat[i], errs[i] = x.wall, x.err
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	slices.Sort(lat)
	fails := 0
	for _, err := range errs {
		if err != nil {
			fails++
			logf("concurrent %s: %v", verb, err)
		}
	}
	return wall, lat, fails
}

// settle waits (at most 30 s) until the conntrack clean-ups that earlier
// DELs left to their detached children are done (their queue file gone),
// so that no batch shares the CPU with the walks of the one before it.
func settle(n *node) {
	queue := filepath.Join(n.dataDir, "eip0", "conntrack")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(queue); os.IsNotExist(err) {
			return
		}
	}
	logf("%s: conntrack clean-ups still queued after 30 s", n.name)
}
