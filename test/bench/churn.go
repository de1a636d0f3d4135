package main

import (
	"bytes"
	"fmt"
	"slices"
)

// Pod churn: a node replaces its pods one after another (a rollout, a Job
// burst, a pod that crashes and is recreated), so that an attachment's ADD
// comes right after another's DEL with no other plugin between. The
// interleaved rows never see that: other scenarios run between a DEL and
// the next ADD of the same node, and whatever a DEL leaves the kernel to
// finish is done by then.
const (
	// backToBack ends the rows of one attachment added and deleted over
	// and over on a node of its own, each ADD right after the DEL before.
	backToBack = ", back to back"
	// cycling ends the rows of a node that holds cycleSize attachments and
	// replaces them in turn: the DEL of one, then its successor's ADD.
	cycling = ", 8 attachments cycling"
	// cycleSize is the attachments of the cycling node.
	cycleSize = 8
)

// churnRow names a back-to-back row.
func churnRow(verb, traffic string) string { return eipRow(verb, "IPv4", traffic) + backToBack }

// cycleRow names a row of the cycling node.
func cycleRow(verb, traffic string) string { return eipRow(verb, "IPv4", traffic) + cycling }

// churnModes are the back-to-back rows' traffic modes: unsteered, then
// the default, the pair the goal compares.
func (b *bench) churnModes() []string {
	return slices.Compact([]string{trafficNone, b.defaultTraffic()})
}

// churnUnits adds, on node n, a unit per traffic mode that runs
// -churn-rounds recorded ADD/DEL pairs of one attachment back to back, a
// new IP each time, after one DEL that is not recorded: every recorded ADD
// follows a DEL of its own mode with nothing between.
func (b *bench) churnUnits(res *results, n *node) {
	for i, traffic := range b.churnModes() {
		s := 210 + i
		k := 1_000_000 + s
		add, del := res.add(churnRow("ADD", traffic), "ADD", "churn"), res.add(churnRow("DEL", traffic), "DEL", "churn")
		res.units = append(res.units, func(it int) {
			for r := -1; r < b.opts.churnRounds; r++ {
				round := b.churnRound(it, r)
				c := b.eipCall(b.bins["external-ip"], "ADD", n, k, traffic, scenarioIP(s, it*b.opts.churnRounds+r, false))
				x := b.execIn(n, c)
				if r >= 0 {
					add.record(b.printed(x, k), round)
				}
				c.command = "DEL"
				x = b.execIn(n, c)
				if r >= 0 {
					del.record(x, round)
				}
			}
		})
	}
}

// churnRound numbers round r of iteration it in the samples, as the uplink
// rows do; a warm-up iteration's rounds are not recorded (-1).
func (b *bench) churnRound(it, r int) int {
	if it < 0 || r < 0 {
		return -1
	}
	return it*b.opts.churnRounds + r
}

// printed fails an ADD that did not print its container's address, as
// every timed ADD must.
func (b *bench) printed(x sample, k int) sample {
	a4, _ := containerAddrs(k)
	if x.err == nil && !bytes.Contains(x.stdout, []byte(a4)) {
		x.err = fmt.Errorf("ADD printed no %s: %q", a4, x.stdout)
	}
	return x
}

// cycle is the cycling node's attachments: slot i holds generation gen[i].
type cycle struct {
	n    *node
	gen  [cycleSize]int
	step int
}

// cycleCall is the call of slot's attachment of generation gen: its own
// container ID, container address and IP, as a new pod has.
func (b *bench) cycleCall(c *cycle, command string, slot, gen int) call {
	k := 3_000_000 + slot*100_000 + gen
	return b.eipCall(b.bins["external-ip"], command, c.n, k, b.defaultTraffic(), fmt.Sprintf("198.19.%d.%d", 220+slot, gen%250+1))
}

// fillCycle adds the cycling node's first generation.
func (b *bench) fillCycle(c *cycle) error {
	for slot := range cycleSize {
		if x := b.execIn(c.n, b.cycleCall(c, "ADD", slot, 0)); x.err != nil {
			return fmt.Errorf("filling %s: %w", c.n.name, x.err)
		}
	}
	return nil
}

// cycleUnits adds the cycling node's unit: -churn-rounds replacements per
// iteration, each the DEL of the oldest attachment then its successor's
// ADD, in the default mode.
func (b *bench) cycleUnits(res *results, c *cycle) {
	add, del := res.add(cycleRow("ADD", b.defaultTraffic()), "ADD", "churn"), res.add(cycleRow("DEL", b.defaultTraffic()), "DEL", "churn")
	res.units = append(res.units, func(it int) {
		for r := range b.opts.churnRounds {
			slot := c.step % cycleSize
			c.step++
			round := b.churnRound(it, r)
			del.record(b.execIn(c.n, b.cycleCall(c, "DEL", slot, c.gen[slot])), round)
			c.gen[slot]++
			add.record(b.printed(b.execIn(c.n, b.cycleCall(c, "ADD", slot, c.gen[slot])), 3_000_000+slot*100_000+c.gen[slot]), round)
		}
	})
}
