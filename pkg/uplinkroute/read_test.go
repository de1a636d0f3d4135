package uplinkroute

import (
	"log/slog"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/nat"
)

// countingRouting counts the Router's reads of the node; the Routing it
// embeds is nil, and so are the Router's uplinks, so a call the test does
// not expect panics.
type countingRouting struct {
	Routing
	marked map[string]nat.UplinkSlot
	calls  map[string]int
}

func (r *countingRouting) DefaultUplink(bool) (int, error) { r.calls["DefaultUplink"]++; return 1, nil }
func (r *countingRouting) Marked() (map[string]nat.UplinkSlot, error) {
	r.calls["Marked"]++
	return maps.Clone(r.marked), nil
}
func (r *countingRouting) LockNode(time.Duration) (func(), error) {
	r.calls["LockNode"]++
	return func() {}, nil
}
func (r *countingRouting) Adopt() error { return nil }

// A DEL reads the marking without looking the default route up (which
// would cost every DEL, on a node that routes or not): leaving the
// default route's uplink it takes no node lock; leaving a routed uplink
// it then takes the lock and reads the marking again, under it.
func TestADelReadsTheMarkingFirstAndLocksOnlyWhenItTouchesIt(t *testing.T) {
	ip := netip.MustParseAddr("203.0.113.10")
	eth1 := map[string]nat.UplinkSlot{"eth1": {Slot: 1, Mark: 0x01000000, Routed: [2]bool{true, false}, Members: [2]int{1, 0}}}
	for _, tc := range []struct {
		uplink string
		want   map[string]int
	}{
		{"eth0", map[string]int{"Marked": 1}},
		{"eth1", map[string]int{"Marked": 2, "LockNode": 1}},
	} {
		r := &countingRouting{marked: eth1, calls: map[string]int{}}
		rt := NewRouter(r, nil, slog.New(slog.DiscardHandler), func(string) {}, time.Second)
		p, err := rt.Change(Change{Leave: []Need{{Uplink: tc.uplink, Addr: ip, IP: ip}}})
		rt.Release()
		if err != nil || !maps.Equal(r.calls, tc.want) {
			t.Errorf("a DEL leaving %s: %v, called %v; want %v", tc.uplink, err, r.calls, tc.want)
		}
		if wantDel := tc.uplink == "eth1"; (len(p.del) == 1) != wantDel {
			t.Errorf("a DEL leaving %s takes members %v away; want %s's own only if its uplink is routed", tc.uplink, p.del, ip)
		}
	}
}
