package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sanity checks once, outside the figures, that external-ip's ADD puts
// the addresses and the IPv6 proxy entry in place and its DEL takes them
// away, and that portmap's do the same with its rules. It also finds out
// whether the built plugin takes the `traffic` key, and steers with it.
func (b *bench) sanity(n *node) error {
	ips := []string{"198.19.0.9", "2001:db8:1::a:0:9"}
	dumps := [][]string{{"ip", "-o", "addr", "show", "dev", "eip0"}, {"ip", "-6", "neigh", "show", "proxy", "dev", "uplink0"}, {"nft", "list", "ruleset"}}
	want := []string{" " + ips[0] + "/32", " " + ips[1] + "/128", ips[1] + " proxy"}
	b.trafficKey = true
	out, err := b.checkPair(n, b.eipCall(b.bins["external-ip"], "ADD", n, 0, trafficBothAddress, ips...), dumps, want)
	if err != nil && strings.Contains(err.Error(), "traffic") {
		logf("SKIP the traffic rows: the built plugin rejects the key: %v", err)
		b.trafficKey = false
		out, err = b.checkPair(n, b.eipCall(b.bins["external-ip"], "ADD", n, 0, trafficBoth, ips...), dumps, want)
	}
	if err != nil {
		return fmt.Errorf("sanity: %w", err)
	}
	if err := b.routeSanity(n, ips); err != nil {
		return fmt.Errorf("sanity: %w", err)
	}
	if b.steers = b.trafficKey && strings.Contains(out[2], ips[0]) && strings.Contains(out[2], ips[1]); b.trafficKey && !b.steers {
		logf("NOTE: the plugin takes `traffic` but made no nftables rule for %v (it predates steering): the `traffic both` rows do what `none` does", ips)
	}
	for backend, dump := range map[string][]string{"iptables": {"iptables-save", "-t", "nat"}, "nftables": {"nft", "list", "ruleset"}} {
		c := call{bin: b.bins["portmap"], command: "ADD", containerID: "pm-sanity", ifName: "eth0", netns: n.podPath(), stdin: b.portmapConf(n, backend)}
		if _, err := b.checkPair(n, c, [][]string{dump}, []string{"10.64.0.3"}); err != nil {
			return fmt.Errorf("sanity: portmap %s: %w", backend, err)
		}
	}
	logf("sanity: external-ip's ADD put %v on eip0 and the proxy entry on uplink0 (steering rules: %v), portmap's its rules on both backends; each DEL took them away", ips, b.steers)
	return nil
}

// routeSanity checks that a steered ADD of the default hold puts each IP
// in place as a route through eip0 with its proxy entry on uplink0, and
// its DEL takes them away.
func (b *bench) routeSanity(n *node, ips []string) error {
	if !b.trafficKey {
		return nil
	}
	dumps := [][]string{{"ip", "route", "show", "dev", "eip0"}, {"ip", "-6", "route", "show", "dev", "eip0"}, {"ip", "neigh", "show", "proxy", "dev", "uplink0"}}
	want := []string{ips[0] + " proto 200", ips[1] + " proto 200", ips[0] + " proxy", ips[1] + " proxy"}
	_, err := b.checkPair(n, b.eipCall(b.bins["external-ip"], "ADD", n, 0, trafficBoth, ips...), dumps, want)
	return err
}

// checkPair runs c as ADD and then as DEL, and checks that after the ADD
// the dump commands (run in n) print every want, and after the DEL none.
// It returns what they printed after the ADD.
func (b *bench) checkPair(n *node, c call, dumps [][]string, want []string) ([]string, error) {
	var after [2][]string
	for i, cmd := range []string{"ADD", "DEL"} {
		c.command = cmd
		if x := b.execIn(n, c); x.err != nil {
			return nil, x.err
		}
		for _, d := range dumps {
			out, err := exec.Command("ip", append([]string{"netns", "exec", n.name}, d...)...).CombinedOutput()
			if err != nil { // a failed command must not read as "not there"
				return nil, fmt.Errorf("%s: %v: %s", strings.Join(d, " "), err, out)
			}
			after[i] = append(after[i], string(out))
		}
	}
	for _, w := range want {
		if all := strings.Join(after[0], ""); !strings.Contains(all, w) {
			return nil, fmt.Errorf("after ADD, no %q in %q", w, all)
		}
		if all := strings.Join(after[1], ""); strings.Contains(all, w) {
			return nil, fmt.Errorf("after DEL, still %q in %q", w, all)
		}
	}
	return after[0], nil
}

// trafficModes are the modes of the empty node's rows: both (held as a
// route, the default) and both held as an address, when the plugin takes
// the key, beside none (held as an address).
func (b *bench) trafficModes() []string {
	if !b.trafficKey {
		return []string{trafficNone}
	}
	return []string{trafficNone, trafficBothAddress, trafficBoth}
}

// defaultTraffic is the mode of the held and what-if rows: the plugin's
// default, both, when it has the key.
func (b *bench) defaultTraffic() string { return b.trafficModes()[len(b.trafficModes())-1] }

// heldUnits make one node per held count, fill it through the plugin (one
// attachment per address, each with its rules when the plugin steers) and
// add its ADD/DEL rows.
func (b *bench) heldUnits(res *results) error {
	s := 100
	for _, v6 := range []bool{false, true} {
		counts := b.opts.held4
		if v6 {
			counts = b.opts.held6
		}
		for _, count := range counts {
			n, err := b.newNode(fmt.Sprintf("h%sx%d", famName(v6)[2:], count))
			if err != nil {
				return err
			}
			if err := b.fill(n, count, v6); err != nil {
				return err
			}
			name := fmt.Sprintf("external-ip ADD %s, traffic %s, %d held", famName(v6), b.defaultTraffic(), count)
			b.eipPair(res, name, "held", n, "external-ip", s, v6, b.defaultTraffic())
			s++
		}
	}
	return nil
}

// fill makes the plugin hold count addresses in n, one attachment each, as
// that many pods would, with fillWorkers ADDs in flight.
func (b *bench) fill(n *node, count int, v6 bool) error {
	logf("filling %s: %d %s attachments, %d ADDs in flight", n.name, count, famName(v6), b.opts.fillWorkers)
	t0 := time.Now()
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range b.opts.fillWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < count; i = int(next.Add(1)) - 1 {
				ip := addrPlus("198.18.16.0", i).String()
				if v6 {
					ip = addrPlus("2001:db8:1::1:0:0", i+1).String()
				}
				if i%1000 == 999 {
					logf("  %s: %d/%d", n.name, i+1, count)
				}
				if x := b.execIn(n, b.eipCall(b.bins["external-ip"], "ADD", n, i, b.defaultTraffic(), ip)); x.err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, x.err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return fmt.Errorf("filling %s: %d of %d ADDs failed, first: %v", n.name, failed.Load(), count, firstErr.Load())
	}
	// Held as addresses or, steered by default, as routes through eip0.
	out, err := exec.Command("sh", "-c", fmt.Sprintf("ip -n %s -o addr show dev eip0; ip -n %[1]s route show dev eip0; ip -n %[1]s -6 route show dev eip0", n.name)).CombinedOutput()
	if got := bytes.Count(out, []byte("\n")); err != nil || got < count {
		return fmt.Errorf("filling %s: eip0 holds %d addresses and routes, want %d (%v)", n.name, bytes.Count(out, []byte("\n")), count, err)
	}
	logf("  %s: %d held in %.1fs (%.0f ADD/s)", n.name, count, time.Since(t0).Seconds(), float64(count)/time.Since(t0).Seconds())
	return nil
}
