package assigner

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/store"
)

func TestWhileHeldSendsOnlyWhatTheAttachmentStillHoldsUnderTheLock(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a, v6a)
	f.add(attB, v4b)
	var got []netip.Addr
	err := f.assigner().WhileHeld(attA, []netip.Addr{v4a, v6a, v4b}, func(held []netip.Addr) error {
		got = held
		// A release waits for the round: the lock is held while it is sent.
		other := f.opts
		other.LockTimeout = 50 * time.Millisecond
		if err := newAssigner(other, f.k).Del(attA); !errors.Is(err, ErrLockTimeout) {
			t.Errorf("DEL during the round = %v, want it to wait for the lock", err)
		}
		return nil
	})
	if err != nil || !slices.Equal(got, []netip.Addr{v4a, v6a}) {
		t.Errorf("WhileHeld = %v with %v, want attA's own [%s %s]", err, got, v4a, v6a)
	}
	f.del(attA)
	err = f.assigner().WhileHeld(attA, []netip.Addr{v4a, v6a}, func([]netip.Addr) error {
		t.Error("a round was sent for IPs the attachment released")
		return nil
	})
	if err != nil {
		t.Errorf("WhileHeld after DEL = %v, want nil", err)
	}
}

func TestWhileHeldSendsNothingWhileAChangeIsPendingOrWithoutState(t *testing.T) {
	f := newFixture(t)
	none := func([]netip.Addr) error { t.Error("a round was sent"); return nil }
	if err := f.assigner().WhileHeld(attA, []netip.Addr{v4a}, none); err != nil {
		t.Errorf("WhileHeld without a state directory = %v, want nil", err)
	}
	f.add(attA, v4a)
	if err := os.WriteFile(f.assigner().st.Path(store.JournalFile), []byte(`{"key":"x","touch":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.assigner().WhileHeld(attA, []netip.Addr{v4a}, none); !errors.Is(err, ErrState) {
		t.Errorf("WhileHeld with a journal pending = %v, want ErrState", err)
	}
}

// The upkeep's re-check: an IP is sent while any attachment holds it on
// the uplink asked, whichever holders left.
func TestWhileHeldOnSendsWhatAnyAttachmentStillHoldsOnThatUplink(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	f.add(attB, v4a, v4b)
	heldOn := func(uplink string) []netip.Addr {
		t.Helper()
		var got []netip.Addr
		if err := f.assigner().WhileHeldOn(uplink, []netip.Addr{v4a, v4b}, func(held []netip.Addr) error { got = held; return nil }); err != nil {
			t.Fatalf("WhileHeldOn(%s) = %v", uplink, err)
		}
		return got
	}
	f.del(attA)
	if got := heldOn("eth0"); !slices.Equal(got, []netip.Addr{v4a, v4b}) {
		t.Errorf("WhileHeldOn(eth0) after attA left = %v, want [%s %s], which attB still holds", got, v4a, v4b)
	}
	if got := heldOn("eth1"); got != nil {
		t.Errorf("WhileHeldOn(eth1) = %v, want nothing: the IPs are announced on eth0", got)
	}
	f.del(attB)
	if got := heldOn("eth0"); got != nil {
		t.Errorf("WhileHeldOn(eth0) after every holder left = %v, want nothing", got)
	}
}

func TestHoldsSaysWhetherAnyAttachmentHoldsTheIPAndDoesNotGuessWhileAChangeIsPending(t *testing.T) {
	f := newFixture(t)
	holds := func(ip netip.Addr) bool {
		t.Helper()
		held, err := f.assigner().Holds(ip)
		if err != nil {
			t.Fatalf("Holds(%s) = %v", ip, err)
		}
		return held
	}
	if holds(v4a) {
		t.Errorf("Holds(%s) without a state directory = true", v4a)
	}
	f.add(attA, v4a)
	f.add(attB, v4a, v6a)
	if !holds(v4a) || !holds(v6a) || holds(v4b) {
		t.Errorf("Holds: %s %v, %s %v, %s %v; want true, true, false", v4a, holds(v4a), v6a, holds(v6a), v4b, holds(v4b))
	}
	f.del(attB)
	if !holds(v4a) || holds(v6a) {
		t.Errorf("after attB left, Holds: %s %v, %s %v; want true (attA), false", v4a, holds(v4a), v6a, holds(v6a))
	}
	if err := os.WriteFile(f.assigner().st.Path(store.JournalFile), []byte(`{"key":"x","touch":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.assigner().Holds(v6a); !errors.Is(err, ErrState) {
		t.Errorf("Holds with a journal pending = %v, want ErrState", err)
	}
}
