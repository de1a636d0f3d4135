package assigner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/fullfs"
)

// The lock is dataDir's own inode: removing the device's lock file, or its
// whole state directory, under an invocation that holds it must not let
// the next one in beside it.
func TestRemovingTheLockUnderItsHolderDoesNotLetAnotherInvocationIn(t *testing.T) {
	removals := map[string]func(f *fixture) error{
		"lock file":          func(f *fixture) error { return os.Remove(filepath.Join(f.stateDir(), "lock")) },
		"device's directory": func(f *fixture) error { return os.RemoveAll(f.stateDir()) },
	}
	for name, remove := range removals {
		t.Run(name, func(t *testing.T) {
			f, kernel := sharedFixture(t)
			release := holdLock(t, f, kernel)
			if err := remove(f); err != nil {
				t.Fatal(errors.Join(err, release()))
			}
			impatient := *f
			impatient.opts.LockTimeout = 200 * time.Millisecond
			_, err := impatient.assigner().Add(attC, []netip.Addr{v4c}, nil)
			if !errors.Is(err, ErrLockTimeout) {
				t.Errorf("Add after the %s was removed under its holder = %v, want ErrLockTimeout: it ran beside the holder", name, err)
			}
			// The holder's own writes may fail in a removed directory.
			release()
		})
	}
}

// A waiter that opened dataDir before it was replaced locks the new one.
func TestAWaiterOfAReplacedDataDirStartsOverOnTheNewOne(t *testing.T) {
	f, kernel := sharedFixture(t)
	release := holdLock(t, f, kernel)
	done := make(chan error, 1)
	go func() { _, err := f.assigner().Add(attC, []netip.Addr{v4c}, nil); done <- err }()
	// Once the waiter has the old dataDir open, it locks that one: swap
	// the directory then, so that it must notice and start over.
	waitForOpen(t, f.opts.DataDir)
	old := f.opts.DataDir + ".old"
	if err := os.Rename(f.opts.DataDir, old); err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiter after dataDir was replaced: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiter never finished")
	}
	if d := readDisk(t, f.stateDir()); len(d.records) != 1 || d.records[attC.Key()].ContainerID != attC.ContainerID {
		t.Errorf("the waiter wrote %v into the new dataDir, want attC's record alone", d.records)
	}
}

// waitForOpen waits, up to a generous bound, until this process has path
// open.
func waitForOpen(t *testing.T, path string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(time.Millisecond) {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target == path {
				return
			}
		}
	}
	t.Fatalf("%s was not opened within 30s", path)
}

// outside is a directory beside dataDir with one file in it, to show that
// nothing reached it through a symlink.
func outside(t *testing.T, f *fixture) (string, func()) {
	dir := filepath.Join(filepath.Dir(f.opts.DataDir), "outside")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Named as a staged write would be, so that a sweep through the link
	// would take it.
	bait := filepath.Join(dir, "journal.12345")
	if err := os.WriteFile(bait, []byte("not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != "journal.12345" {
			t.Errorf("the directory a symlink pointed to changed: %v %v", entries, err)
		}
	}
}

func TestASymlinkInsideTheStateDirectoryIsNeverFollowed(t *testing.T) {
	entries := []struct {
		name string
		rel  string
		dir  bool
	}{
		{"tmp/", "tmp", true},
		{"ip/", "ip", true},
		{"att/", "att", true},
		{"device directory", "", true},
		{"lock", "lock", false},
		{"journal", "journal", false},
		{"record", "att/" + attA.Key() + ".json", false},
		{"index", "ip/198.51.100.1.json", false},
	}
	ops := map[string]func(a *Assigner) error{
		"Add": func(a *Assigner) error { _, err := a.Add(attA, []netip.Addr{v4a, v4b}, nil); return err },
		"Del": func(a *Assigner) error { return a.Del(attA) },
		"GC":  func(a *Assigner) error { return a.GC("net1", nil) },
	}
	for _, e := range entries {
		for op, run := range ops {
			t.Run(e.name+"/"+op, func(t *testing.T) {
				f := newFixture(t)
				f.add(attA, v4a)
				dir, unchanged := outside(t, f)
				target := dir
				if !e.dir {
					target = filepath.Join(dir, "journal.12345")
				}
				link := filepath.Join(f.stateDir(), e.rel)
				if err := os.RemoveAll(link); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				err := run(f.assigner())
				if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symlink") {
					t.Errorf("%s with %s a symlink = %v, want ErrState naming %s as a symlink", op, e.name, err, link)
				}
				unchanged()
			})
		}
	}
}

func TestADanglingLockSymlinkCreatesNoFileOutsideDataDir(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	target := filepath.Join(filepath.Dir(f.opts.DataDir), "planted")
	lock := filepath.Join(f.stateDir(), "lock")
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, lock); err != nil {
		t.Fatal(err)
	}
	_, err := f.assigner().Add(attB, []netip.Addr{v4b}, nil)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), lock) {
		t.Errorf("Add with a dangling lock symlink = %v, want ErrState naming %s", err, lock)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock symlink's target %s was created (%v)", target, err)
	}
}

// A write killed mid-way leaves a staged file in tmp/; every invocation
// that starts a change sweeps it, and only what is named as ours.
func TestEveryChangeSweepsWhatAKilledWriteLeftInTmp(t *testing.T) {
	ops := map[string]func(f *fixture){
		"Add of another attachment": func(f *fixture) { f.add(attB, v4b) },
		"Del":                       func(f *fixture) { f.del(attA) },
		"GC":                        func(f *fixture) { f.assigner().GC("net9", nil) },
	}
	for op, run := range ops {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a)
			tmp := filepath.Join(f.stateDir(), "tmp")
			staged := []string{"journal.4242", attA.Key() + ".json.17", "198.51.100.1.json.99", "creating-device.5"}
			for _, n := range append(staged, "not-ours") {
				if err := os.WriteFile(filepath.Join(tmp, n), []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			run(f)
			left := dirNames(t, tmp)
			if len(left) != 1 || left[0] != "not-ours" {
				t.Errorf("after %s, tmp/ holds %v, want only not-ours", op, left)
			}
		})
	}
}

func TestASystemDirectoryIsRefusedAsDataDir(t *testing.T) {
	link := filepath.Join(t.TempDir(), "etc-link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/", "/etc", "/usr/lib/eip", "/proc/eip", "/var/run", "/tmp", link} {
		t.Run(dir, func(t *testing.T) {
			f := newFixture(t)
			f.opts.DataDir = dir
			// A name of its own, so that a failing run leaves nothing that
			// looks like a real holder's state, and removes what it made.
			f.opts.Device = fmt.Sprintf("eipt%d", os.Getpid()%10000)
			made := filepath.Join(dir, f.opts.Device)
			if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
				made = dir
			}
			t.Cleanup(func() { os.RemoveAll(made) })
			_, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `dataDir: "`+dir+`"`) {
				t.Errorf("Add with dataDir %s = %v, want ErrRefused naming dataDir and its value", dir, err)
			}
			if _, err := os.Lstat(made); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after the refusal (%v)", made, err)
			}
			if l := f.k.link(t, f.opts.Device); l != nil {
				t.Errorf("the refused Add made holder %s", l.Name)
			}
		})
	}
}

const nobody = 65534

func mustRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user; CI runs as root")
	}
}

func TestAnUnsafeDataDirIsRefusedAndNothingIsMadeThere(t *testing.T) {
	mustRoot(t)
	cases := map[string]func(base string) (dataDir string, err error){
		"world-writable parent without the sticky bit": func(base string) (string, error) {
			return filepath.Join(base, "data"), os.Chmod(base, 0o777)
		},
		"group-writable parent": func(base string) (string, error) {
			return filepath.Join(base, "a", "data"), errors.Join(os.Mkdir(filepath.Join(base, "a"), 0o770), os.Chmod(filepath.Join(base, "a"), 0o770))
		},
		"parent owned by another user": func(base string) (string, error) {
			return filepath.Join(base, "data"), os.Chown(base, nobody, nobody)
		},
		"dataDir owned by another user": func(base string) (string, error) {
			d := filepath.Join(base, "data")
			return d, errors.Join(os.Mkdir(d, 0o700), os.Chown(d, nobody, nobody))
		},
		"world-writable dataDir": func(base string) (string, error) {
			d := filepath.Join(base, "data")
			return d, errors.Join(os.Mkdir(d, 0o700), os.Chmod(d, os.ModeSticky|0o777))
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			base := t.TempDir()
			dir, err := setup(base)
			if err != nil {
				t.Fatal(err)
			}
			f.opts.DataDir = dir
			_, err = f.assigner().Add(attA, []netip.Addr{v4a}, nil)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `dataDir: "`+dir+`"`) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Add = %v, want one line of ErrRefused naming dataDir %q", err, dir)
			}
			assertUntouched(t, f)
		})
	}
}

func TestAStickyWorldWritableParentIsAcceptedAsTmpIs(t *testing.T) {
	mustRoot(t)
	f := newFixture(t)
	base := t.TempDir()
	if err := os.Chmod(base, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	f.opts.DataDir = filepath.Join(base, "data")
	f.add(attA, v4a)
	assertState(t, f, holdings{attA: {v4a}})
}

// The attack: dataDir under a directory everyone may write to, where an
// unprivileged user made the state directory and planted a journal whose
// replay would put an address of their choosing (the LAN router's) on the
// holder. It is refused and nothing is replayed.
func TestAJournalPlantedWhereOthersCanWriteIsNeverReplayed(t *testing.T) {
	mustRoot(t)
	f := newFixture(t)
	base := t.TempDir()
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	f.opts.DataDir = filepath.Join(base, "data")
	router := netip.MustParseAddr("198.51.100.254")
	planted := journal{Key: attC.Key(), Record: &record{Attachment: attC, IPs: []netip.Addr{router}}, Touch: []netip.Addr{router}}
	b, _ := json.Marshal(planted)
	// What an unprivileged user could have made there.
	dev := filepath.Join(f.opts.DataDir, testDevice)
	for _, d := range []string{f.opts.DataDir, dev, dev + "/ip", dev + "/att", dev + "/tmp"} {
		if err := errors.Join(os.Mkdir(d, 0o700), os.Chown(d, nobody, nobody)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(os.WriteFile(dev+"/journal", b, 0o600), os.Chown(dev+"/journal", nobody, nobody)); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func(a *Assigner) error{
		"Add": func(a *Assigner) error { _, err := a.Add(attA, []netip.Addr{v4a}, nil); return err },
		"GC":  func(a *Assigner) error { return a.GC("net1", []Attachment{attC}) },
	} {
		err := run(f.assigner())
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "dataDir") {
			t.Errorf("%s with a planted journal = %v, want ErrRefused naming dataDir", name, err)
		}
	}
	if _, err := os.Stat(dev + "/journal"); err != nil {
		t.Errorf("the planted journal was consumed: %v", err)
	}
	if l := f.k.link(t, testDevice); l != nil {
		t.Errorf("holder %s was made and carries %v", l.Name, sortedAddrs(l.Addrs))
	}
}

// A tmp/ (or att/, ip/) that another user owns or may write to is not ours:
// nothing is swept from it or trusted in it.
func TestAStateSubdirectoryOthersCouldWriteIsRefusedAndNotSwept(t *testing.T) {
	mustRoot(t)
	changes := map[string]func(dir string) error{
		"owned by another user": func(dir string) error { return os.Chown(dir, nobody, nobody) },
		"group-writable":        func(dir string) error { return os.Chmod(dir, 0o770) },
	}
	for _, sub := range []string{"tmp", "att", "ip"} {
		for name, change := range changes {
			t.Run(sub+"/"+name, func(t *testing.T) {
				f := newFixture(t)
				f.add(attA, v4a)
				dir := filepath.Join(f.stateDir(), sub)
				staged := filepath.Join(dir, "journal.12345")
				if err := errors.Join(os.WriteFile(staged, []byte("{"), 0o600), change(dir)); err != nil {
					t.Fatal(err)
				}
				err := f.assigner().GC("net1", []Attachment{attA})
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), dir) {
					t.Errorf("GC with %s %s = %v, want ErrRefused naming it", sub, name, err)
				}
				if _, err := os.Stat(staged); err != nil {
					t.Errorf("GC swept or touched %s: %v", staged, err)
				}
			})
		}
	}
}

// STATUS changes nothing: on a fresh node it makes no state directory, and
// where the state exists it leaves nothing new in it.
func TestReadyMakesNoStateDirectoryAndLeavesNothingInOne(t *testing.T) {
	f := newFixture(t)
	f.k.addNet("0.0.0.0/0", eth1Index, false)
	if err := f.assigner().Ready(true, false); err != nil {
		t.Fatalf("Ready on a fresh node = %v, want success", err)
	}
	if _, err := os.Lstat(f.opts.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Ready made the dataDir %s (%v); STATUS must change nothing", f.opts.DataDir, err)
	}
	f.add(attA, v4a)
	if err := os.Remove(filepath.Join(f.stateDir(), "tmp")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, f.opts.DataDir)
	if err := f.assigner().Ready(true, false); err != nil {
		t.Fatalf("Ready beside held state = %v, want success", err)
	}
	if after := tree(t, f.opts.DataDir); !maps.Equal(before, after) {
		t.Errorf("Ready changed the state directory:\nbefore %v\nafter  %v", before, after)
	}
}

// What STATUS must still find without making anything: a state filesystem
// that is read-only, or full.
func TestReadyFindsAStateFilesystemAnAddCouldNotWrite(t *testing.T) {
	mustRoot(t)
	for name, setup := range map[string]func(t *testing.T, f *fixture){
		"read-only, no dataDir yet": func(t *testing.T, f *fixture) {
			base := filepath.Dir(f.opts.DataDir)
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=64k,mode=0755", "tmpfs", base).CombinedOutput(); err != nil {
				t.Fatalf("mount: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", base).Run() })
		},
		"full, with the state there": func(t *testing.T, f *fixture) {
			if err := os.MkdirAll(f.opts.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			fullfs.Mount(t, f.opts.DataDir, 3)
			f.add(attA, v4a)
			fill := filepath.Join(f.opts.DataDir, "filler2")
			for i := 0; os.WriteFile(fmt.Sprintf("%s.%d", fill, i), []byte("x"), 0o600) == nil; i++ {
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.k.addNet("0.0.0.0/0", eth1Index, false)
			setup(t, f)
			err := f.assigner().Ready(true, false)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "not writable") {
				t.Errorf("Ready = %v, want ErrState saying the state directory is not writable", err)
			}
		})
	}
}

// readers are the invocations that only read the state: each must change
// nothing in it.
var readers = map[string]func(a *Assigner) error{
	"Report": func(a *Assigner) error { _, err := a.Report(); return err },
	"WhileHeld": func(a *Assigner) error {
		return a.WhileHeld(attA, []netip.Addr{v4a}, func([]netip.Addr) error { return nil })
	},
	"WhileHeldOn": func(a *Assigner) error {
		return a.WhileHeldOn("eth0", []netip.Addr{v4a}, func([]netip.Addr) error { return nil })
	},
	"Check": func(a *Assigner) error { _, err := a.Check(attA); return err },
}

// status, CHECK and the announcer's re-check make nothing: a state
// directory with a part missing is one with no state, which they report
// as such, and they leave it as they found it.
func TestTheReadersMakeNothingInAnIncompleteStateDirectory(t *testing.T) {
	for _, part := range []string{"tmp", "att", "ip", "lock"} {
		for name, read := range readers {
			t.Run(part+"/"+name, func(t *testing.T) {
				f := newFixture(t)
				f.add(attA, v4a)
				if err := os.RemoveAll(filepath.Join(f.stateDir(), part)); err != nil {
					t.Fatal(err)
				}
				before := tree(t, f.opts.DataDir)
				err := read(f.assigner())
				if after := tree(t, f.opts.DataDir); !maps.Equal(before, after) {
					t.Errorf("%s without %s changed the state directory:\nbefore %v\nafter  %v", name, part, before, after)
				}
				if want := name == "Check" && (part == "att" || part == "ip"); errors.Is(err, ErrDrift) != want || (!want && err != nil) {
					t.Errorf("%s without %s = %v; want Check to fail with ErrDrift only without att/ or ip/, others nil", name, part, err)
				}
			})
		}
	}
}

// What each reader makes of a missing part: without att/ or ip/ no IP is
// held and no round sent; a missing tmp/ or lock file hides no record
// from an operator's status or the announcer.
func TestAReaderTakesAMissingPartAsNoState(t *testing.T) {
	for _, tc := range []struct {
		part string
		held bool
	}{{"att", false}, {"ip", false}, {"tmp", true}, {"lock", true}} {
		t.Run(tc.part, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a)
			if err := os.RemoveAll(filepath.Join(f.stateDir(), tc.part)); err != nil {
				t.Fatal(err)
			}
			rep, err := f.assigner().Report()
			if err != nil || (len(rep.IPs) == 1) != tc.held || rep.Holder != "up" {
				t.Errorf("Report without %s = %+v, %v; want %v held %v, the holder up", tc.part, rep, err, v4a, tc.held)
			}
			sent := false
			round := func([]netip.Addr) error { sent = true; return nil }
			if err := f.assigner().WhileHeld(attA, []netip.Addr{v4a}, round); err != nil || sent != tc.held {
				t.Errorf("WhileHeld without %s = %v, round sent %v; want nil, sent %v", tc.part, err, sent, tc.held)
			}
		})
	}
}

// The readers look for the journal through the device directory's handle,
// as every other file: a symlink there is refused, never taken for a
// pending change.
func TestTheReadersRefuseASymlinkedJournal(t *testing.T) {
	for name, read := range readers {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.add(attA, v4a)
			dir, unchanged := outside(t, f)
			journal := filepath.Join(f.stateDir(), "journal")
			if err := os.Symlink(filepath.Join(dir, "journal.12345"), journal); err != nil {
				t.Fatal(err)
			}
			err := read(f.assigner())
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), journal) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("%s with the journal a symlink = %v, want ErrState naming %s as a symlink", name, err, journal)
			}
			unchanged()
		})
	}
}

// A journal that cannot be read fails every ADD and DEL with code 5 until
// an operator moves it aside; STATUS must say so, naming the file.
func TestReadyFailsWhileACorruptJournalBlocksEveryAddAndDel(t *testing.T) {
	f := newFixture(t)
	f.k.addNet("0.0.0.0/0", eth1Index, false)
	f.add(attA, v4a)
	journal := filepath.Join(f.stateDir(), "journal")
	if err := os.WriteFile(journal, []byte("{garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.assigner().Add(attB, []netip.Addr{v4b}, nil); !errors.Is(err, ErrState) {
		t.Fatalf("ADD beside a corrupt journal = %v, want ErrState: the premise of this test", err)
	}
	err := f.assigner().Ready(true, false)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), journal) {
		t.Errorf("Ready beside a corrupt journal = %v, want ErrState naming %s", err, journal)
	}
}
