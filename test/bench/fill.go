package main

import (
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"
)

// fill makes the plugin hold count addresses in n, one attachment each, as
// that many pods would, with fillWorkers ADDs in flight.
func (b *bench) fill(n *node, count int, v6 bool) (heldInfo, error) {
	info := heldInfo{count: count, family: "IPv4"}
	if v6 {
		info.family = "IPv6"
	}
	logf("filling %s: %s %s addresses, one attachment each, %d ADDs in flight", n.name, thousands(count), info.family, b.opts.fillWorkers)
	t0 := time.Now()
	bin := b.bins["external-ip"].path
	// The first ADD runs alone and creates the holder device: concurrent
	// first ADDs on a node without it race (see the cold-start rows).
	if x := b.execIn(n, b.eipCall(bin, "ADD", n, "fill-0", fillIP(0, v6), nil)); x.err != nil {
		return info, fmt.Errorf("filling %s: first ADD: %w", n.name, x.err)
	}
	var done atomic.Int64
	done.Store(1)
	stop := b.fillProgress(n, count, t0, &done)
	var firstErr error
	mk := func(i int) call { return b.eipCall(bin, "ADD", n, fmt.Sprintf("fill-%d", i+1), fillIP(i+1, v6), nil) }
	err := n.ns.Do(func(nsNetNS) error {
		b.launch(count-1, b.opts.fillWorkers, mk, func(_ int, x sample) {
			if x.err != nil && info.fails == 0 {
				firstErr = x.err
			}
			if x.err != nil {
				info.fails++
			}
			done.Add(1)
		})
		return nil
	})
	close(stop)
	info.took = time.Since(t0)
	if err == nil && info.fails > 0 {
		err = fmt.Errorf("%d of %d ADDs failed, first: %v", info.fails, count, firstErr)
	}
	if err != nil {
		return info, fmt.Errorf("filling %s: %w", n.name, err)
	}
	return info, b.checkFilled(n, info)
}

// fillProgress logs the fill's rate every five seconds until stop closes.
func (b *bench) fillProgress(n *node, count int, t0 time.Time, done *atomic.Int64) chan struct{} {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				rate := float64(d) / time.Since(t0).Seconds()
				logf("  %s: %d/%d held (%.0f ADD/s, %.0fs to go)", n.name, d, count, rate, float64(int64(count)-d)/rate)
			}
		}
	}()
	return stop
}

// checkFilled counts what the kernel holds, once, outside any measurement.
func (b *bench) checkFilled(n *node, info heldInfo) error {
	out, _ := exec.Command("ip", "-n", n.name, "-o", "addr", "show", "dev", "eip0").Output()
	got := strings.Count(string(out), "\n")
	if got < info.count {
		return fmt.Errorf("filling %s: eip0 has %d addresses, want %d", n.name, got, info.count)
	}
	logf("  %s: %s %s addresses held in %.1fs (%.0f ADD/s)", n.name, thousands(info.count), info.family,
		info.took.Seconds(), float64(info.count)/info.took.Seconds())
	return nil
}

// fillIP is the i-th held address of a family.
func fillIP(i int, v6 bool) string {
	if v6 {
		return addr6("2001:db8:1::1:0:0", i+1)
	}
	return addr4("198.18.16.0", i)
}
