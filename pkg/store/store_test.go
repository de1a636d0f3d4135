package store

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	ipA  = netip.MustParseAddr("198.51.100.1")
	ipB  = netip.MustParseAddr("2001:db8::1")
	attA = Attachment{Network: "net1", ContainerID: "ctr-a", IfName: "eth0"}
)

func mustLock(t *testing.T, s *Store, mode Access) *Lock {
	t.Helper()
	l, err := s.Lock(mode, 5*time.Second)
	if err != nil || l == nil {
		t.Fatalf("Lock = %v, %v; want the lock", l, err)
	}
	return l
}

// The lock excludes a second Store of the same state, and a Store can be
// locked again once unlocked, as an Assigner does call after call.
func TestALockExcludesAnotherAndCanBeTakenAgain(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	first := New(dataDir, "eip0")
	l := mustLock(t, first, MakeAll)
	second := New(dataDir, "eip0")
	if l2, err := second.Lock(MakeParts, 100*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		if l2 != nil {
			l2.Unlock()
		}
		t.Fatalf("a second Lock while the first is held = %v, want ErrLockTimeout", err)
	}
	l.Unlock()
	mustLock(t, second, MakeParts).Unlock()
	mustLock(t, first, ReadOnly).Unlock()
}

// A waiter that got the lock asks whether its dataDir is still at its
// path: gone, or a directory on the way replaced by a file, says start
// over at the path; any other failure is an error of its own, which the
// lock returns rather than retrying until it times out.
func TestStillAtTellsAMovedDataDirFromAFailureToLook(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "data")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path       string
		same, fail bool
	}{
		{d, true, false},
		{filepath.Join(dir, "gone"), false, false},
		{filepath.Join(dir, "file", "data"), false, false},
		{filepath.Join(dir, strings.Repeat("x", 300)), false, true},
	} {
		same, err := stillAt(fd, tt.path)
		if same != tt.same || (err != nil) != tt.fail {
			t.Errorf("stillAt(%s) = %v, %v; want %v and an error %v", tt.path, same, err, tt.same, tt.fail)
		}
	}
}

// A reader makes nothing: without a state directory there is no state.
func TestAReadOnlyLockMakesNothing(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	for _, mode := range []Access{ReadOnly, MakeParts} {
		l, err := New(dataDir, "eip0").Lock(mode, time.Second)
		if l != nil || err != nil {
			t.Errorf("Lock(%d) without state = %v, %v; want no lock and no error", mode, l, err)
		}
		if _, err := os.Lstat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Lock(%d) made dataDir (%v)", mode, err)
		}
	}
}

func TestRecordsAndIndexEntriesReadBackAsWritten(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "data"), "eip0")
	defer mustLock(t, s, MakeAll).Unlock()
	rec := &Record{Attachment: attA, IPs: []netip.Addr{ipA, ipB}, Route: 200}
	if err := s.WriteRecord(attA.Key(), rec); err != nil {
		t.Fatal(err)
	}
	for _, ip := range rec.IPs {
		if err := s.WriteIP(ip, IPEntry{Holders: []string{"b", attA.Key(), "b"}, Uplink: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ReadRecord(attA.Key())
	if err != nil || got == nil || got.Attachment != attA || !slices.Equal(got.IPs, rec.IPs) || got.Route != 200 {
		t.Errorf("ReadRecord = %+v, %v; want %+v", got, err, rec)
	}
	if recs, err := s.Records(); err != nil || len(recs) != 1 || recs[attA.Key()] == nil {
		t.Errorf("Records = %v, %v; want attA's alone", recs, err)
	}
	e, err := s.ReadIP(ipA)
	if err != nil || !slices.Equal(e.Holders, []string{attA.Key(), "b"}) || e.Uplink != "eth0" {
		t.Errorf("ReadIP = %+v, %v; want its holders sorted and unique, uplink eth0", e, err)
	}
	if err := s.WriteIP(ipA, IPEntry{}); err != nil {
		t.Fatal(err)
	}
	if ips, err := s.Indexed(); err != nil || !slices.Equal(ips, []netip.Addr{ipB}) {
		t.Errorf("Indexed after ipA lost its holders = %v, %v; want [%s]: an entry without holders is removed", ips, err, ipB)
	}
	if err := s.RemoveRecord(attA.Key()); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadRecord(attA.Key()); got != nil || err != nil {
		t.Errorf("ReadRecord after RemoveRecord = %+v, %v; want none", got, err)
	}
}

func TestAJournalOfAStepKindThisBinaryDoesNotKnowIsRefused(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "data"), "eip0")
	defer mustLock(t, s, MakeAll).Unlock()
	if err := s.Write(JournalFile, &Journal{Op: OpRelease, Key: attA.Key(), Steps: []Step{{Kind: "later"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadJournal(); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), `"later"`) {
		t.Errorf("ReadJournal of a step of kind later = %v; want ErrState naming the kind", err)
	}
}

// A write killed mid-way leaves its staged file in tmp/: SweepTmp removes
// what a write of every kind of state file leaves, and nothing else.
func TestSweepTmpRemovesWhatAKilledWriteOfEveryFileLeaves(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "data"), "eip0")
	defer mustLock(t, s, MakeAll).Unlock()
	tmp := filepath.Join(s.Dir(), "tmp")
	left := []string{"journal.4242", "creating-device.5", "conntrack.8", "status.3", attA.Key() + ".json.17", ipA.String() + ".json.99", ipB.String() + ".json.1"}
	kept := []string{"conntrack", "journal.x", "not-ours"}
	for _, n := range append(slices.Clone(left), kept...) {
		if err := os.WriteFile(filepath.Join(tmp, n), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SweepTmp(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(names, kept) {
		t.Errorf("after SweepTmp tmp/ holds %v, want %v: every staged write swept, nothing else", names, kept)
	}
}

// State is for root's eyes only: every file the store writes is 0600 and
// every directory it makes 0700, dataDir's missing parts included.
func TestStateFilesAre0600AndDirectories0700(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "a", "data")
	s := New(dataDir, "eip0")
	l := mustLock(t, s, MakeAll)
	writes := []error{
		s.WriteRecord(attA.Key(), &Record{Attachment: attA, IPs: []netip.Addr{ipA, ipB}}),
		s.WriteIP(ipA, IPEntry{Holders: []string{attA.Key()}}),
		s.Write(JournalFile, &Journal{Op: OpRelease, Key: attA.Key()}),
		s.Write(CreatingFile, map[string]string{"temp": "eipnew0"}),
		s.Write(ConntrackFile, []string{}),
	}
	l.Unlock()
	if err := errors.Join(writes...); err != nil {
		t.Fatal(err)
	}
	files := 0
	err := filepath.WalkDir(filepath.Dir(dataDir), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if e.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v: state is for root's eyes only", path, got, want)
		}
		return nil
	})
	if err != nil || files != 6 {
		t.Fatalf("walking %s: %v, %d files; want the lock and the 5 files written", dataDir, err, files)
	}
}
