package assigner

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// testOwner is an Owner that records what it was asked and refuses when
// told to.
type testOwner struct {
	refuse error
	saw    []string // the holders of each IP, as Check read them
}

func (o *testOwner) Check(st StateReader, key string, ips []netip.Addr) error {
	for _, ip := range ips {
		e, err := st.ReadIP(ip)
		if err != nil {
			return err
		}
		o.saw = append(o.saw, e.Holders...)
	}
	return o.refuse
}

func (o *testOwner) Owns(ips []netip.Addr) (string, []netip.Addr) { return "network net1", ips[:1] }

func TestAnOwnersRefusalChangesNothingAndItsAnswerIsRecorded(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	owner := &testOwner{refuse: errors.New("198.51.100.1: is owned by network net2")}
	f.opts.Owner = owner
	before := readDisk(t, f.stateDir())
	a := f.assigner()
	_, err := a.Add(attA, []netip.Addr{v4a, v4b}, nil)
	a.Close()
	if err == nil || err.Error() != "198.51.100.1: is owned by network net2" {
		t.Fatalf("Add with a refusing Owner: %v; want its refusal as it is", err)
	}
	if !slices.Contains(owner.saw, attB.Key()) {
		t.Errorf("the Owner read holders %v under the lock; want B's key among them", owner.saw)
	}
	if after := readDisk(t, f.stateDir()); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused ADD changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("holder has %v after the refusal; want B's 198.51.100.1 alone", got)
	}

	owner.refuse = nil
	f.add(attA, v4a, v4b)
	rec := readDisk(t, f.stateDir()).records[attA.Key()]
	if rec.Owner != "network net1" || !slices.Equal(rec.Owned, []netip.Addr{v4a}) {
		t.Fatalf("A's record %+v; want owner network net1 owning 198.51.100.1", rec)
	}
}
