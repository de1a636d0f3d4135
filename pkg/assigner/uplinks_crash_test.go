package assigner

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
)

var onEth1V4b = netip.MustParseAddr("203.0.113.11")

// uplinkCrash is a change of an attachment whose IP is on eth1, the
// uplink that is not the default route's: its first or last IP there, or
// one beside b's IP there.
type uplinkCrash struct {
	name         string
	besideB, del bool
}

var uplinkCrashes = []uplinkCrash{
	{name: "ADD of the uplink's first IP"},
	{name: "ADD beside an IP held on the uplink", besideB: true},
	{name: "DEL of the uplink's last IP", del: true},
	{name: "DEL beside an IP held on the uplink", besideB: true, del: true},
}

// prepare makes the holdings before the change, and leaves the fixture
// steering for a.
func (c uplinkCrash) prepare(t *testing.T) (*fixture, *fakeRouting) {
	f, r := routedFixture(t)
	n := f.opts.NAT.(*fakeNAT)
	if c.besideB {
		f.steered(n, traffic.Both, ctrB4)
		f.add(attB, onEth1V4b)
		f.steered(n, traffic.Both, ctrA4)
	}
	if c.del {
		f.add(attA, onEth1V4)
	}
	return f, r
}

func (c uplinkCrash) op() func(*Assigner) error {
	if c.del {
		return delOp(attA)
	}
	return addOp(attA, onEth1V4)
}

// want is the routing once the change is settled: a's ADD rolled back or
// its DEL finished, so only b's IP and address are routed, if b holds one.
func (c uplinkCrash) want(gw netip.Addr) (map[string]nat.UplinkSlot, map[nat.UplinkMember]bool, map[int][2]netip.Addr) {
	if !c.besideB {
		return map[string]nat.UplinkSlot{}, map[nat.UplinkMember]bool{}, map[int][2]netip.Addr{}
	}
	return map[string]nat.UplinkSlot{"eth1": {Slot: 1, Mark: 0x01000000, Routed: [2]bool{true, false}}},
		map[nat.UplinkMember]bool{{Slot: 1, Uplink: "eth1", Addr: onEth1V4b}: true, {Slot: 1, Uplink: "eth1", Addr: ctrB4.Addr(), Egress: true}: true},
		map[int][2]netip.Addr{1: {gw}}
}

func TestAnUplinkChangeKilledAtAnyStepLeavesTheRoutingTheRecordsNeed(t *testing.T) {
	stranger := Attachment{Network: "net9", ContainerID: "nobody", IfName: "eth0"}
	reached := map[string]bool{}
	for _, c := range uplinkCrashes {
		f, _ := c.prepare(t)
		var steps []string
		a := f.assigner()
		a.step = func(step string) { steps = append(steps, step) }
		if err := c.op()(a); err != nil {
			t.Fatalf("%s without a crash: %v", c.name, err)
		}
		for n, step := range steps {
			reached[step] = true
			t.Run(fmt.Sprintf("%s/killed at %s (step %d)", c.name, step, n+1), func(t *testing.T) {
				f, r := c.prepare(t)
				if got := runCrashing(f.assigner(), c.op(), n, "panic"); got != step {
					t.Fatalf("crashed at %q, want %q: the steps are not deterministic", got, step)
				}
				// After a killed ADD, any invocation rolls it back; a
				// killed DEL is retried by the runtime (killed before its
				// journal, it changed nothing that another call would see).
				next := delOp(stranger)
				if c.del {
					next = c.op()
				}
				if err := next(f.assigner()); err != nil {
					t.Fatalf("the invocation after the crash: %v", err)
				}
				marked, members, routes := c.want(r.gw["eth1"])
				if !maps.Equal(r.marked, marked) || !maps.Equal(r.members, members) || !maps.Equal(r.routes, routes) {
					t.Errorf("after the next invocation: marked %v, members %v, routes %v; want %v, %v, %v", r.marked, r.members, r.routes, marked, members, routes)
				}
				if c.besideB {
					if _, err := f.checkAs(attB, ctrB4); err != nil {
						t.Errorf("CHECK of b, whose IP is still held on the uplink: %v", err)
					}
				}
			})
		}
	}
	for _, step := range []string{"uplink-routed", "uplink-members", "uplink-unmarked"} {
		if !reached[step] {
			t.Errorf("no change passes step %q, so a crash there is untested (steps reached: %v)", step, slices.Sorted(maps.Keys(reached)))
		}
	}
}
