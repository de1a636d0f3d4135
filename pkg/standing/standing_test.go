package standing

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/store"
)

var (
	a = netip.MustParseAddr("192.0.2.1")
	b = netip.MustParseAddr("192.0.2.2")
)

func TestAProbeAnsweredHoldsInStandbyOnlyWhenTheNetworkStandsBy(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	answered := errkind.Errorf(announce.ErrConflict, "%s: another host (%w) answered", a, &announce.Answered{MAC: mac})
	if !errors.Is(answered, announce.ErrConflict) {
		t.Fatalf("%v: not a conflict; the test's error is wrong", answered)
	}
	s := Set{}
	if _, ok := s.Probed(false, a, answered); ok || s[a] {
		t.Fatalf("standby off: held in standby")
	}
	if _, ok := s.Probed(true, a, errors.New("no uplink")); ok || s[a] {
		t.Fatalf("another error: held in standby")
	}
	got, ok := s.Probed(true, a, answered)
	if !ok || !s[a] || got.String() != mac.String() {
		t.Fatalf("answered, standby on: got %v %v %v", got, ok, s)
	}
}

func TestTheRecordListsStandbyIPsApart(t *testing.T) {
	rec := &store.Record{}
	Of([]netip.Addr{b}).Fill(rec, []netip.Addr{a, b}, true)
	if !slices.Equal(rec.IPs, []netip.Addr{a}) || !slices.Equal(rec.StandbyIPs, []netip.Addr{b}) || !rec.Standby {
		t.Fatalf("record %+v", rec)
	}
	hold, standby := Roles(rec)
	if !hold[a] || hold[b] || standby[a] || !standby[b] {
		t.Fatalf("roles: hold %v standby %v", hold, standby)
	}
}

func TestAMoveAppliesOnlyToTheRecordReadAndKeepsItsOwner(t *testing.T) {
	old := &store.Record{IPs: []netip.Addr{a}, StandbyIPs: []netip.Addr{b}, Owner: "ns/x", Owned: []netip.Addr{a}}
	rec := &store.Record{}
	if Moves(old, rec, []netip.Addr{a}) {
		t.Fatalf("a move of fewer IPs than the record holds applies")
	}
	if Moves(nil, rec, []netip.Addr{a}) {
		t.Fatalf("a move of a released record applies")
	}
	if !Moves(old, rec, []netip.Addr{b, a}) || rec.Owner != "ns/x" || !slices.Equal(rec.Owned, old.Owned) {
		t.Fatalf("a move of the record read: owner %q %v", rec.Owner, rec.Owned)
	}
}

func TestTheIndexKeepsItsStandbyHoldersWhenTheLastActiveLeaves(t *testing.T) {
	e := store.IPEntry{Uplink: "eth0", Holders: []string{"k1"}, Route: 200}
	left, quiet := Left(e, []string{"k2"}, false)
	if quiet || left.Uplink != "eth0" || left.Route != 200 || !slices.Equal(left.Standby, []string{"k2"}) || len(left.Holders) != 0 {
		t.Fatalf("left %+v quiet %v", left, quiet)
	}
	if left, _ := Left(e, nil, false); left.Uplink != "" || left.Standby != nil {
		t.Fatalf("nobody waiting: left %+v", left)
	}
	if _, quiet := Left(store.IPEntry{Standby: []string{"k2"}}, nil, false); !quiet {
		t.Fatalf("an IP only stood by here: not quiet")
	}
}

func TestDriftOfAStandbyIP(t *testing.T) {
	e := store.IPEntry{Standby: []string{"k1"}}
	if d := Drift(a, e, []string{"k1"}, false, false, "eip0"); len(d) != 0 {
		t.Fatalf("no drift expected: %v", d)
	}
	if d := Drift(a, e, []string{"k1", "k2"}, false, true, "eip0"); len(d) != 2 {
		t.Fatalf("index and holder drift expected: %v", d)
	}
	if _, same := Waiting(store.IPEntry{Uplink: "eth0", Standby: []string{"k1"}}, []string{"k1"}, "eth0"); !same {
		t.Fatalf("an index already listing its standby holders is rewritten")
	}
}
