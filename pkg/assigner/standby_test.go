package assigner

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// answered is a probe answered by another host for the IPs in theirs,
// as announce.Session words it.
func answered(theirs ...netip.Addr) hooks {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	return hooks{probe: func(t announce.Target) error {
		if slices.Contains(theirs, t.Addr) {
			return errkind.Errorf(announce.ErrConflict, "%s: another host (%w) answered", t.Addr, &announce.Answered{MAC: mac})
		}
		return nil
	}}
}

// addWith is an ADD with an announcer, which f.add has not.
func (f *fixture) addWith(att Attachment, ann Announcer, ips ...netip.Addr) ([]Placed, error) {
	a := f.assigner()
	defer a.Close()
	return a.Add(att, ips, ann)
}

func TestAnAddAnsweredByAnotherHostIsRefusedWithoutStandby(t *testing.T) {
	f := newFixture(t)
	f.probing()
	if _, err := f.addWith(attA, answered(v4a), v4a); !errors.Is(err, announce.ErrConflict) {
		t.Fatalf("ADD of an IP another host answers for, standby off: %v, want the conflict", err)
	}
	assertState(t, f, holdings{})
}

func TestAStandbyAddSucceedsAndPutsNothingOnTheHolder(t *testing.T) {
	f := newFixture(t)
	f.probing()
	f.opts.Standby = true
	var announced []netip.Addr
	ann := answered(v4a, v6a)
	ann.announce = func(ts []announce.Target) error {
		for _, t := range ts {
			announced = append(announced, t.Addr)
		}
		return nil
	}
	placed, err := f.addWith(attA, ann, v4a, v6a, v4b)
	if err != nil {
		t.Fatalf("standby ADD of IPs another host answers for: %v", err)
	}
	for _, p := range placed {
		if p.Standby != (p.Addr != v4b) {
			t.Errorf("%s placed with Standby %v", p.Addr, p.Standby)
		}
	}
	if !slices.Equal(announced, []netip.Addr{v4b}) {
		t.Errorf("the ADD announced %v, want only the IP it holds actively, %s", announced, v4b)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4b}) {
		t.Errorf("holder carries %v, want only %s: a standby IP is not on the holder", got, v4b)
	}
	d := readDisk(t, f.stateDir())
	rec := d.records[attA.Key()]
	if !slices.Equal(rec.IPs, []netip.Addr{v4b}) || !slices.Equal(sorted(rec.StandbyIPs), sorted([]netip.Addr{v4a, v6a})) || !rec.Standby {
		t.Errorf("record holds %v actively and %v in standby (standby %v), want [%s] and [%s %s]", rec.IPs, rec.StandbyIPs, rec.Standby, v4b, v4a, v6a)
	}
	for _, ip := range []netip.Addr{v4a, v6a} {
		if e := d.index[ip]; len(e.Holders) != 0 || !slices.Equal(e.Standby, []string{attA.Key()}) || e.Uplink == "" {
			t.Errorf("index of %s: holders %v, standby %v, uplink %q; want none, the attachment, an uplink", ip, e.Holders, e.Standby, e.Uplink)
		}
	}
	a := f.assigner()
	if held, err := a.Check(attA); err != nil || len(held) != 3 {
		t.Errorf("CHECK of a standby attachment: %v, %v; want it to pass with its 3 IPs", held, err)
	}
	rep, err := f.assigner().Report()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drift) != 0 {
		t.Errorf("status reports drift for a standby holder: %v", rep.Drift)
	}
	for _, ir := range rep.IPs {
		if (ir.Addr == v4b) != (len(ir.Holders) == 1 && len(ir.Standby) == 0) {
			t.Errorf("status shows %s with holders %v and standby %v", ir.Addr, ir.Holders, ir.Standby)
		}
	}
}

func TestADelOfAStandbyRemovesOnlyItsRecord(t *testing.T) {
	f := newFixture(t)
	f.probing()
	f.opts.Standby = true
	if _, err := f.addWith(attA, answered(v4a), v4a); err != nil {
		t.Fatal(err)
	}
	if _, err := f.addWith(attB, answered(v4a), v4a); err != nil {
		t.Fatal(err)
	}
	var said []netip.Addr
	f.opts.Goodbye = func(t announce.Target) { said = append(said, t.Addr) }
	dels := f.k.calls["delAddr"] + f.k.calls["delRoute"] + f.k.calls["delProxy"]
	f.del(attA)
	d := readDisk(t, f.stateDir())
	if e := d.index[v4a]; !slices.Equal(e.Standby, []string{attB.Key()}) || len(e.Holders) != 0 {
		t.Errorf("after the DEL of one standby, index of %s: holders %v standby %v, want the other alone in standby", v4a, e.Holders, e.Standby)
	}
	f.del(attB)
	assertState(t, f, holdings{})
	if len(said) != 0 {
		t.Errorf("a DEL of a standby said goodbye for %v: it held nothing on the LAN", said)
	}
	if got := f.k.calls["delAddr"] + f.k.calls["delRoute"] + f.k.calls["delProxy"]; got != dels {
		t.Errorf("the DELs of standby holders removed %d things from the kernel: %v", got-dels, f.k.calls)
	}
}

func TestTheNodeProcessMovesAnAttachmentBetweenStandbyAndActive(t *testing.T) {
	f := newFixture(t)
	f.probing()
	f.opts.Standby = true
	if _, err := f.addWith(attA, answered(v4a, v6a), v4a, v6a); err != nil {
		t.Fatal(err)
	}
	// A takeover: the record's IPs, none in standby, no probe.
	f.opts.Probe, f.opts.Move = 0, true
	if _, err := f.addWith(attA, nil, v4a, v6a); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	assertState(t, f, holdings{attA: {v4a, v6a}})
	// A yield of one IP.
	f.opts.InStandby = []netip.Addr{v6a}
	if _, err := f.addWith(attA, nil, v4a, v6a); err != nil {
		t.Fatalf("yield: %v", err)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("after yielding %s the holder carries %v, want %s alone", v6a, got, v4a)
	}
	d := readDisk(t, f.stateDir())
	if e := d.index[v6a]; len(e.Holders) != 0 || !slices.Equal(e.Standby, []string{attA.Key()}) {
		t.Errorf("after the yield, index of %s: holders %v standby %v", v6a, e.Holders, e.Standby)
	}
	f.opts.InStandby = nil
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if d := readDisk(t, f.stateDir()); !slices.Equal(d.index[v6a].Standby, []string{attA.Key()}) {
		t.Errorf("GC lost the standby holder of %s: index %+v", v6a, d.index[v6a])
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("after GC the holder carries %v, want %s alone", got, v4a)
	}
	var said []netip.Addr
	f.opts.Goodbye = func(t announce.Target) { said = append(said, t.Addr) }
	f.del(attA)
	if !slices.Equal(said, []netip.Addr{v4a}) {
		t.Errorf("the DEL of the active holder said goodbye for %v, want %s (the IP it took off the holder)", said, v4a)
	}
}

// An uplink with no carrier answers no probe: a network that stands by
// holds the IP in standby rather than as a second active; one that does
// not holds it as before.
func TestAStandbyAddOnAnUplinkWithNoCarrierStandsBy(t *testing.T) {
	f := newFixture(t)
	f.probing()
	f.k.changeUplink("eth0", func(u *fakeUplink) { u.noCarrier = true })
	probed := 0
	ann := hooks{probe: func(announce.Target) error { probed++; return nil }}
	if _, err := f.addWith(attA, ann, v4a); err != nil || probed != 1 {
		t.Fatalf("an ADD without standby: %v, %d probes; want it held after one probe", err, probed)
	}
	f.opts.Standby = true
	placed, err := f.addWith(attB, ann, v4b)
	if err != nil {
		t.Fatal(err)
	}
	if len(placed) != 1 || !placed[0].Standby || probed != 1 {
		t.Fatalf("a standby ADD with no carrier: placed %+v after %d probes; want it in standby, unprobed", placed, probed)
	}
	if got := f.holderAddrs(); !slices.Equal(got, []netip.Addr{v4a}) {
		t.Errorf("the holder carries %v, want %s alone", got, v4a)
	}
}

// The health gate yields when the node's uplink goes down: the move to
// standby must work then, though an ADD's and a takeover's do not.
func TestAYieldWorksWhileTheUplinkIsDown(t *testing.T) {
	f := newFixture(t)
	f.opts.Standby = true
	f.add(attA, v4a)
	f.k.changeUplink("eth0", func(u *fakeUplink) { u.down = true })
	if _, err := f.addWith(attB, nil, v4a); !errors.Is(err, ErrRefused) {
		t.Fatalf("an ADD with the uplink down: %v; want it refused", err)
	}
	f.opts.Move, f.opts.InStandby = true, nil
	if _, err := f.addWith(attA, nil, v4a); !errors.Is(err, ErrRefused) {
		t.Fatalf("a takeover with the uplink down: %v; want it refused", err)
	}
	f.opts.InStandby, f.opts.UplinkDownOK = []netip.Addr{v4a}, true
	if _, err := f.addWith(attA, nil, v4a); err != nil {
		t.Fatalf("yield with the uplink down: %v", err)
	}
	if got := f.holderAddrs(); len(got) != 0 {
		t.Errorf("after the yield the holder carries %v, want nothing", got)
	}
	if e := readDisk(t, f.stateDir()).index[v4a]; len(e.Holders) != 0 || !slices.Equal(e.Standby, []string{attA.Key()}) {
		t.Errorf("after the yield, index of %s: holders %v standby %v", v4a, e.Holders, e.Standby)
	}
}

func TestAMoveOfARecordReleasedMeanwhileRecreatesNothing(t *testing.T) {
	f := newFixture(t)
	f.opts.Move = true
	if _, err := f.addWith(attA, nil, v4a); err != nil {
		t.Fatalf("move of a record that is not there: %v", err)
	}
	assertState(t, f, holdings{})
	f.opts.Move = false
	f.add(attA, v4a, v4b)
	f.opts.Move, f.opts.InStandby = true, []netip.Addr{v4a}
	if _, err := f.addWith(attA, nil, v4a); err != nil {
		t.Fatal(err)
	}
	assertState(t, f, holdings{attA: {v4a, v4b}})
}

func TestAStandbyIsNotSteeredUntilItTakesOverAndNotAfterItYields(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.opts.Routing = newFakeRouting()
	f.probing()
	f.opts.Standby = true
	if _, err := f.addWith(attA, answered(v4a), v4a); err != nil {
		t.Fatal(err)
	}
	if len(n.st.Ingress[v4a]) != 0 || len(n.st.Egress) != 0 {
		t.Fatalf("a standby ADD steered: ingress %v egress %v", n.st.Ingress, n.st.Egress)
	}
	f.opts.Probe, f.opts.Move = 0, true
	if _, err := f.addWith(attA, nil, v4a); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if got := n.st.Ingress[v4a]; !slices.Equal(got, []netip.Addr{ctrA4.Addr()}) {
		t.Errorf("after the takeover %s steers to %v, want the standby holder's container", v4a, got)
	}
	f.opts.InStandby = []netip.Addr{v4a}
	if _, err := f.addWith(attA, nil, v4a); err != nil {
		t.Fatalf("yield: %v", err)
	}
	if len(n.st.Ingress[v4a]) != 0 || len(n.st.Egress) != 0 {
		t.Errorf("after the yield: ingress %v egress %v, want none", n.st.Ingress, n.st.Egress)
	}
}

// A release says goodbye as the released record stands by, which its ADD
// wrote, whatever the releasing call's options say: a DEL reads the
// standby key leniently and may take it as false.
func TestAReleaseSaysGoodbyeAsItsRecordStandsByNotAsTheCallSays(t *testing.T) {
	f := newFixture(t)
	f.probing()
	f.opts.Standby = true
	if _, err := f.addWith(attA, hooks{}, v4a); err != nil {
		t.Fatal(err)
	}
	f.opts.Standby = false
	if _, err := f.addWith(attB, hooks{}, v4b); err != nil {
		t.Fatal(err)
	}
	var said []netip.Addr
	f.opts.Goodbye = func(t announce.Target) { said = append(said, t.Addr) }
	f.del(attA)
	if !slices.Equal(said, []netip.Addr{v4a}) {
		t.Errorf("the DEL of a record that stands by, called without standby, said goodbye for %v; want %s", said, v4a)
	}
	said = nil
	f.opts.Standby = true
	f.del(attB)
	if len(said) != 0 {
		t.Errorf("the DEL of a record that does not stand by, called with standby, said goodbye for %v; want none", said)
	}
}
