package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/test/fullfs"
)

// errNoCap is what the kernel answers every change without CAP_NET_ADMIN.
var errNoCap = Errorf(ErrHost, "netlink: operation not permitted")

// Without CAP_NET_ADMIN the kernel refuses the new address and the removal
// alike: the ADD is undone in the state, and since it never put the
// address there, nothing is left for the kernel to take back.
func TestAnAddTheKernelRefusesEverythingLeavesNoJournalRecordOrIndex(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4a)
	for _, m := range []string{"addAddr", "delAddr", "addProxy", "delProxy"} {
		f.k.failWith(m, netip.Addr{}, errNoCap)
	}
	_, err := f.assigner().Add(attA, []netip.Addr{v4b, v6a}, nil)
	if !errors.Is(err, ErrHost) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Add without CAP_NET_ADMIN = %q, want one line of ErrHost", err)
	}
	if d := readDisk(t, f.stateDir()); d.journal || len(d.tmp) > 0 {
		t.Errorf("the refused Add left a journal (%v) or staged files %v", d.journal, d.tmp)
	}
	assertState(t, f, holdings{attB: {v4a}})
}

// When the undo itself cannot finish, the ADD's journal stays and says so,
// in one line; the next invocation rolls the ADD back rather than forward.
func TestAnAddWhoseRollbackFailsIsRolledBackByTheNextInvocation(t *testing.T) {
	f := newFixture(t)
	f.add(attB, v4c)
	// v4a goes on the holder, v4b is refused, and v4a cannot come off.
	f.k.failWith("addAddr", v4b, errNoCap)
	f.k.failWith("delAddr", v4a, errNoCap)
	_, err := f.assigner().Add(attA, []netip.Addr{v4a, v4b}, nil)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "the next invocation rolls it back") {
		t.Fatalf("Add whose rollback failed = %q, want one line saying the next invocation rolls it back", err)
	}
	if !readDisk(t, f.stateDir()).journal {
		t.Fatal("the ADD whose rollback failed left no journal for the next invocation")
	}
	f.k.failWith("delAddr", v4a, nil)
	f.k.failWith("addAddr", v4b, nil)
	f.del(Attachment{Network: "net9", ContainerID: "nobody", IfName: "eth0"})
	assertState(t, f, holdings{attB: {v4c}})
}

// On a full state filesystem a failed ADD leaves no journal, no record, no
// index entry and no address nobody holds, whatever step ran out of room;
// and the next invocation finds nothing to complete.
func TestAnAddOnAFullFilesystemLeavesNothingBehind(t *testing.T) {
	mustRoot(t)
	reachedKernel := false
	for free := 0; free <= 6; free++ {
		t.Run(fmt.Sprintf("%d pages free", free), func(t *testing.T) {
			f := newFixture(t)
			if err := os.MkdirAll(f.stateDir(), 0o700); err != nil {
				t.Fatal(err)
			}
			fullfs.Mount(t, f.opts.DataDir, free)
			ips := []netip.Addr{v4a, v4b, v6a}
			_, err := f.assigner().Add(attA, ips, nil)
			if err == nil {
				assertState(t, f, holdings{attA: ips})
				return
			}
			if !errors.Is(err, ErrState) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Add on a full filesystem = %q, want one line of ErrState", err)
			}
			reachedKernel = reachedKernel || f.k.count("addAddr") > 0
			d := readDisk(t, f.stateDir())
			if d.journal || len(d.tmp) > 0 {
				t.Errorf("the failed Add left a journal (%v) or staged files %v", d.journal, d.tmp)
			}
			assertState(t, f, holdings{})
			f.del(Attachment{Network: "net9", ContainerID: "nobody", IfName: "eth0"})
			assertState(t, f, holdings{})
		})
	}
	if !reachedKernel {
		t.Error("no run ran out of room after adding an address, so no rollback of the kernel was tested")
	}
}

// A re-ADD that runs out of room is undone in place: its undo puts back
// files whose bytes never changed, which needs no room, so the attachment
// keeps what it held and no journal is left for the next call to settle.
func TestAReAddOnAFullFilesystemIsUndoneAtOnce(t *testing.T) {
	mustRoot(t)
	undone := false
	for free := 3; free <= 6; free++ {
		t.Run(fmt.Sprintf("%d pages free", free), func(t *testing.T) {
			f := newFixture(t)
			if err := os.MkdirAll(f.opts.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			fullfs.Mount(t, f.opts.DataDir, free)
			if _, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil); err != nil {
				t.Fatalf("no room for the first ADD: %v", err)
			}
			_, err := f.assigner().Add(attA, []netip.Addr{v4a, v4b}, nil)
			if err == nil {
				assertState(t, f, holdings{attA: {v4a, v4b}})
				return
			}
			undone = true
			if !errors.Is(err, ErrState) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "rolling back also failed") {
				t.Errorf("re-ADD on a full filesystem = %q, want one line of ErrState, rolled back at once", err)
			}
			if readDisk(t, f.stateDir()).journal {
				t.Error("the failed re-ADD left its journal for the next invocation")
			}
			assertState(t, f, holdings{attA: {v4a}})
		})
	}
	if !undone {
		t.Error("no re-ADD ran out of room: the test does not exercise the undo")
	}
}
