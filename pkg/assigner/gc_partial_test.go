package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// GC goes on past what it cannot release (the CNI spec: remove as much
// as possible and report the errors). Each test runs a few times: the
// records come in map order, and the failing one must not stop the rest
// whether it comes first or last.
const gcRounds = 8

var (
	attD  = Attachment{Network: "net1", ContainerID: "ctr-d", IfName: "eth0"}
	stray = netip.MustParseAddr("198.51.100.50")
)

func recordPath(f *fixture, att Attachment) string {
	return filepath.Join(f.stateDir(), "att", att.Key()+".json")
}

// fourHeld is a fixture where attA, attB and attD of net1 and attC of
// net2 each hold an IP of their own.
func fourHeld(t *testing.T) *fixture {
	f := newFixture(t)
	f.add(attA, v4a)
	f.add(attB, v4b)
	f.add(attD, v4c)
	f.add(attC, v6b)
	return f
}

// mustCarry fails unless the holder carries exactly the IPs marked true
// of those in want.
func mustCarry(t *testing.T, f *fixture, want map[netip.Addr]bool) {
	t.Helper()
	got := f.holderAddrs()
	for ip, on := range want {
		if slices.Contains(got, ip) != on {
			t.Errorf("after GC the holder carries %v; %s on it should be %v", got, ip, on)
		}
	}
}

func mustExist(t *testing.T, path string, want bool) {
	t.Helper()
	if _, err := os.Stat(path); (err == nil) != want {
		t.Errorf("%s exists: %v, want %v", path, err == nil, want)
	}
}

func TestGCReleasesEveryStaleRecordItCanAndReconcilesPastOneItCannot(t *testing.T) {
	for round := range gcRounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			f := fourHeld(t)
			// attB's IP's index entry is corrupt: its release fails before
			// it changes anything.
			index := f.assigner().st.IPPath(v4b)
			if err := os.WriteFile(index, []byte("{garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			f.k.changeLink(t, testDevice, func(l *fakeLink) { l.Addrs[stray] = true })

			err := f.assigner().GC("net1", nil)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), index) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("GC = %v, want one line of kind ErrState naming %s", err, index)
			}
			mustExist(t, recordPath(f, attA), false)
			mustExist(t, recordPath(f, attD), false)
			mustExist(t, recordPath(f, attB), true)
			mustExist(t, recordPath(f, attC), true)
			mustCarry(t, f, map[netip.Addr]bool{v4a: false, v4c: false, stray: false, v4b: true, v6b: true})
		})
	}
}

func TestGCReleasesTheStaleRecordsItCanReadBesideACorruptOne(t *testing.T) {
	for round := range gcRounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			f := fourHeld(t)
			corrupt := recordPath(f, attB)
			if err := os.WriteFile(corrupt, []byte("{garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := f.assigner().GC("net1", nil)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), corrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("GC = %v, want one line of kind ErrState naming %s", err, corrupt)
			}
			mustExist(t, recordPath(f, attA), false)
			mustExist(t, recordPath(f, attD), false)
			mustExist(t, recordPath(f, attC), true)
			// What the unreadable record holds stays: the pod may still be
			// there, and a reconcile without its record would take it away.
			mustCarry(t, f, map[netip.Addr]bool{v4a: false, v4c: false, v4b: true, v6b: true})
		})
	}
}
