package localpool

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
	"github.com/external-ip/external-ip/pkg/store"
)

// state is a store.Reader over records alone: the index is derived from
// them, as the assigner keeps it.
type state map[string]*store.Record

func (s state) Indexed() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, r := range s {
		for _, ip := range r.IPs {
			if !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

func (s state) ReadIP(ip netip.Addr) (store.IPEntry, error) {
	var e store.IPEntry
	for k, r := range s {
		if slices.Contains(r.IPs, ip) {
			e.Holders = append(e.Holders, k)
		}
		if slices.Contains(r.StandbyIPs, ip) {
			e.Standby = append(e.Standby, k)
		}
	}
	slices.Sort(e.Holders)
	slices.Sort(e.Standby)
	return e, nil
}

func (s state) ReadRecord(key string) (*store.Record, error) { return s[key], nil }

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func pool(t *testing.T, ranges ...string) Pool {
	t.Helper()
	rs, err := iprange.Parse("pools.web", ranges)
	if err != nil {
		t.Fatal(err)
	}
	return Pool{Name: "web", Ranges: rs}
}

func (s state) hold(key, owner string, ips ...string) {
	s[key] = &store.Record{IPs: addrs(ips...), Owner: owner, Owned: addrs(ips...)}
}

func TestPickGivesTheFirstFreeIPOfEachFamilyAndKeepsARecordsOwn(t *testing.T) {
	p := pool(t, "192.0.2.0/30", "2001:db8::1-2001:db8::2")
	both := []iprange.Family{iprange.IPv4, iprange.IPv6}
	st := state{}
	got, err := Pick(st, "a", p, both, nil)
	if err != nil || !slices.Equal(got.IPs, addrs("192.0.2.1", "2001:db8::1")) || !slices.Equal(got.Given, got.IPs) {
		t.Fatalf("empty pool: %+v %v; want the first IP of each family given (a /30 gives neither its network nor its broadcast)", got, err)
	}
	st.hold("a", "network n", "192.0.2.1", "2001:db8::1")
	got, err = Pick(st, "b", p, both, func(ip netip.Addr) bool { return ip == netip.MustParseAddr("2001:db8::2") })
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "pool web has no free IPv6 address (1 of 2 held)") {
		t.Fatalf("second ADD with ::2 skipped: %+v %v; want IPv6 exhausted, one line naming the pool and the count", got, err)
	}
	got, err = Pick(st, "b", p, []iprange.Family{iprange.IPv4}, nil)
	if err != nil || !slices.Equal(got.IPs, addrs("192.0.2.2")) {
		t.Fatalf("second ADD, IPv4 only: %+v %v; want 192.0.2.2", got, err)
	}
	got, err = Pick(st, "a", p, both, nil)
	if err != nil || !slices.Equal(got.IPs, addrs("192.0.2.1", "2001:db8::1")) || got.Given != nil {
		t.Fatalf("re-ADD: %+v %v; want what the record owns, kept, none given", got, err)
	}
}

// TestAReADDKeepsAPoolIPASiblingShares: another attachment of the owner
// named the IP and shares it, as the rules allow; the attachment the pool
// gave it to keeps it on a re-ADD, and it is no fresh gift, so that Check
// lets the sibling go on sharing it.
func TestAReADDKeepsAPoolIPASiblingShares(t *testing.T) {
	p := pool(t, "192.0.2.0/30")
	st := state{}
	st.hold("a", "network n", "192.0.2.1")
	st.hold("c", "network n", "192.0.2.1")
	got, err := Pick(st, "a", p, []iprange.Family{iprange.IPv4}, nil)
	if err != nil || !slices.Equal(got.IPs, addrs("192.0.2.1")) || got.Given != nil {
		t.Fatalf("re-ADD of an IP a sibling shares: %+v %v; want 192.0.2.1 kept, none given", got, err)
	}
	r := Rules{Owner: "network n", InPool: func(netip.Addr) string { return "web" }, Given: got.Given}
	if err := r.Check(st, "a", got.IPs); err != nil {
		t.Errorf("Check of the kept IP: %v", err)
	}
}

func TestAHugePoolIsPickedFromWithoutWalkingIt(t *testing.T) {
	p := pool(t, "2001:db8::/32")
	st := state{}
	st.hold("x", "network n", "2001:db8::1", "2001:db8::2")
	got, err := Pick(st, "a", p, []iprange.Family{iprange.IPv6}, nil)
	if err != nil || !slices.Equal(got.IPs, addrs("2001:db8::3")) {
		t.Fatalf("%v %v; want 2001:db8::3", got, err)
	}
}

func TestCheckSharesWithinAnOwnerAndRefusesAnotherNamingIt(t *testing.T) {
	inPool := func(ip netip.Addr) string {
		if netip.MustParsePrefix("192.0.2.0/24").Contains(ip) {
			return "web"
		}
		return ""
	}
	st := state{}
	st.hold("a", "namespace team-a", "192.0.2.1")
	st["legacy"] = &store.Record{IPs: addrs("192.0.2.9", "198.51.100.1")}
	st["waiting"] = &store.Record{StandbyIPs: addrs("192.0.2.5"), Standby: true, Owner: "namespace team-a", Owned: addrs("192.0.2.5")}
	for _, tc := range []struct {
		name  string
		rules Rules
		ips   []netip.Addr
		kind  error
		want  string
	}{
		{"same owner names it", Rules{Owner: "namespace team-a", InPool: inPool}, addrs("192.0.2.1"), nil, ""},
		{"another owner names it", Rules{Owner: "namespace team-b", InPool: inPool}, addrs("192.0.2.1"), ErrOwned,
			"192.0.2.1: is owned by namespace team-a; an attachment of namespace team-b may not hold it"},
		{"a network without pools names it", Rules{Owner: "network other"}, addrs("192.0.2.1"), ErrOwned, "is owned by namespace team-a"},
		{"given but taken meanwhile, even by the same owner", Rules{Owner: "namespace team-a", InPool: inPool, Given: addrs("192.0.2.1")}, addrs("192.0.2.1"), ErrTaken,
			"192.0.2.1: given from pool web but taken by another attachment meanwhile"},
		{"an unowned holder of a pool IP", Rules{Owner: "namespace team-a", InPool: inPool}, addrs("192.0.2.9"), ErrOwned, "192.0.2.9: lies in pool web but is held by an attachment that owns no pool IP"},
		{"another owner names an IP held here in standby only", Rules{Owner: "namespace team-b", InPool: inPool}, addrs("192.0.2.5"), ErrOwned,
			"192.0.2.5: is owned by namespace team-a"},
		{"an IP outside pools is shared as ever", Rules{Owner: "namespace team-b", InPool: inPool}, addrs("198.51.100.1"), nil, ""},
		{"a free IP", Rules{Owner: "namespace team-b", InPool: inPool, Given: addrs("192.0.2.2")}, addrs("192.0.2.2"), nil, ""},
		{"the attachment's own", Rules{Owner: "namespace team-a", InPool: inPool, Given: addrs("192.0.2.1")}, addrs("192.0.2.1"), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "new"
			if tc.name == "the attachment's own" {
				key = "a"
			}
			err := tc.rules.Check(st, key, tc.ips)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v naming %q", err, tc.kind, tc.want)
			}
		})
	}
}

func TestOwnsKeepsTheOwnerOnlyForIPsInAPool(t *testing.T) {
	r := Rules{Owner: OwnerOf("net", ""), InPool: func(ip netip.Addr) string {
		if ip == netip.MustParseAddr("192.0.2.1") {
			return "web"
		}
		return ""
	}}
	if owner, owned := r.Owns(addrs("192.0.2.1", "198.51.100.1")); owner != "network net" || !slices.Equal(owned, addrs("192.0.2.1")) {
		t.Errorf("Owns = %q %v; want network net owning 192.0.2.1 alone", owner, owned)
	}
	if owner, owned := r.Owns(addrs("198.51.100.1")); owner != "" || owned != nil {
		t.Errorf("Owns of no pool IP = %q %v; want nothing, so that the record is as before pools", owner, owned)
	}
	if got := OwnerOf("net", "team-a"); got != "namespace team-a" {
		t.Errorf("OwnerOf with a namespace = %q", got)
	}
}
