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

// churn is the churn rows' two nodes: n, where one attachment is added
// and deleted back to back, and the cycling node.
type churn struct {
	b     *bench
	n     *node
	cycle cycle
}

// cycle is the cycling node's attachments: slot i holds generation gen[i].
type cycle struct {
	n    *node
	gen  [cycleSize]int
	step int
}

// newChurn makes both nodes, fills the cycling one and adds their units.
func newChurn(b *bench, res *results) (*churn, error) {
	n, err := b.newNode("churn")
	if err != nil {
		return nil, err
	}
	m, err := b.newNode("cycle")
	if err != nil {
		return nil, err
	}
	c := &churn{b: b, n: n, cycle: cycle{n: m}}
	if err := c.fillCycle(); err != nil {
		return nil, err
	}
	c.units(res)
	c.cycleUnits(res)
	return c, nil
}

// modes are the back-to-back rows' traffic modes: unsteered, then the
// default, the pair the goal compares.
func (c *churn) modes() []string {
	return slices.Compact([]string{trafficNone, c.b.defaultTraffic()})
}

// units adds a unit per traffic mode that runs -churn-rounds recorded
// ADD/DEL pairs of one attachment back to back, a new IP each time, after
// one DEL that is not recorded: every recorded ADD follows a DEL of its
// own mode with nothing between.
func (c *churn) units(res *results) {
	b, rounds := c.b, c.b.opts.churnRounds
	for i, traffic := range c.modes() {
		s := 210 + i
		k := 1_000_000 + s
		add, del := res.add(churnRow("ADD", traffic), "ADD", "churn"), res.add(churnRow("DEL", traffic), "DEL", "churn")
		perIteration(rounds, add, del)
		res.units = append(res.units, func(it int) {
			for r := -1; r < rounds; r++ {
				call := b.eipCall(b.bins["external-ip"], "ADD", c.n, k, traffic, scenarioIP(s, it*rounds+r, false))
				x := printed(b.execIn(c.n, call), k)
				call.command = "DEL"
				y := b.execIn(c.n, call)
				if r >= 0 {
					add.record(x, c.round(it, r))
					del.record(y, c.round(it, r))
				}
			}
		})
	}
}

// round numbers round r of iteration it in the samples, as the uplink
// rows do; a warm-up iteration's rounds are not recorded (-1).
func (c *churn) round(it, r int) int {
	if it < 0 || r < 0 {
		return -1
	}
	return it*c.b.opts.churnRounds + r
}

// printed fails an ADD of attachment k that did not print its
// container's address, as every timed ADD must.
func printed(x sample, k int) sample {
	a4, _ := containerAddrs(k)
	if x.err == nil && !bytes.Contains(x.stdout, []byte(a4)) {
		x.err = fmt.Errorf("ADD printed no %s: %q", a4, x.stdout)
	}
	return x
}

// cycleCall is the call of slot's attachment of generation gen: its own
// container ID, container address and IP, as a new pod has.
func (c *churn) cycleCall(command string, slot, gen int) (call, int) {
	k := 3_000_000 + slot*100_000 + gen
	return c.b.eipCall(c.b.bins["external-ip"], command, c.cycle.n, k, c.b.defaultTraffic(), fmt.Sprintf("198.19.%d.%d", 220+slot, gen%250+1)), k
}

// fillCycle adds the cycling node's first generation.
func (c *churn) fillCycle() error {
	for slot := range cycleSize {
		call, _ := c.cycleCall("ADD", slot, 0)
		if x := c.b.execIn(c.cycle.n, call); x.err != nil {
			return fmt.Errorf("filling %s: %w", c.cycle.n.name, x.err)
		}
	}
	return nil
}

// cycleUnits adds the cycling node's unit: -churn-rounds replacements per
// iteration, each the DEL of the oldest attachment then its successor's
// ADD, in the default mode.
func (c *churn) cycleUnits(res *results) {
	def, cy := c.b.defaultTraffic(), &c.cycle
	add, del := res.add(cycleRow("ADD", def), "ADD", "churn"), res.add(cycleRow("DEL", def), "DEL", "churn")
	perIteration(c.b.opts.churnRounds, add, del)
	res.units = append(res.units, func(it int) {
		for r := range c.b.opts.churnRounds {
			slot := cy.step % cycleSize
			cy.step++
			old, _ := c.cycleCall("DEL", slot, cy.gen[slot])
			del.record(c.b.execIn(cy.n, old), c.round(it, r))
			cy.gen[slot]++
			next, k := c.cycleCall("ADD", slot, cy.gen[slot])
			add.record(printed(c.b.execIn(cy.n, next), k), c.round(it, r))
		}
	})
}

// churnComparisons hold a steered ADD right after a DEL to the unsteered
// one's in the same conditions (also paired by round, with the CPU time:
// what the steered ADD waits for shows as wall time that is not CPU), and
// show what back to back and a cycling node cost over the interleaved rows.
func churnComparisons(def string) []comparison {
	return []comparison{
		{ours: churnRow("ADD", def), ref: churnRow("ADD", trafficNone), diff: true, goal: "<= +1 ms"},
		{ours: churnRow("ADD", def), ref: churnRow("ADD", trafficNone), paired: true, cpu: true},
		{ours: churnRow("DEL", def), ref: churnRow("DEL", trafficNone), diff: true},
		{ours: churnRow("ADD", def), ref: "host-local ADD"},
		{ours: churnRow("DEL", def), ref: "host-local DEL"},
		{ours: churnRow("ADD", def), ref: eipRow("ADD", "IPv4", def), diff: true},
		{ours: cycleRow("ADD", def), ref: churnRow("ADD", def), diff: true},
		{ours: cycleRow("DEL", def), ref: churnRow("DEL", def), diff: true},
	}
}
