package assigner

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCorruptStateFileIsAnErrorNamingItAndChangesNothing(t *testing.T) {
	files := map[string]func(f *fixture) string{
		"record":  func(f *fixture) string { return filepath.Join(f.stateDir(), "att", attA.Key()+".json") },
		"index":   func(f *fixture) string { return filepath.Join(f.stateDir(), "ip", v4a.String()+".json") },
		"journal": func(f *fixture) string { return filepath.Join(f.stateDir(), "journal") },
	}
	ops := map[string]func(a *Assigner) error{
		"re-Add": func(a *Assigner) error { _, err := a.Add(attA, []netip.Addr{v4a, v6a}, nil); return err },
		"Add of another attachment sharing the IP": func(a *Assigner) error {
			_, err := a.Add(attB, []netip.Addr{v4a}, nil)
			return err
		},
		"Del":   func(a *Assigner) error { return a.Del(attA) },
		"GC":    func(a *Assigner) error { return a.GC("net1", nil) },
		"Check": func(a *Assigner) error { _, err := a.Check(attA); return err },
	}
	// The operations that never read the file: they may succeed.
	unread := map[[2]string]bool{
		{"record", "Add of another attachment sharing the IP"}: true,
	}
	for file, path := range files {
		for op, run := range ops {
			if unread[[2]string{file, op}] {
				continue
			}
			t.Run(file+"/"+op, func(t *testing.T) {
				f := newFixture(t)
				f.add(attA, v4a, v6a, v4b)
				bad := path(f)
				if err := os.WriteFile(bad, []byte(`{"ips": ["198.51.100.1", `), 0o600); err != nil {
					t.Fatal(err)
				}
				before, host := tree(t, f.stateDir()), f.k.snapshot(t)

				err := run(f.assigner())
				if op == "Check" && file != "journal" {
					// CHECK reports a pending journal as drift before reading it.
					if !errors.Is(err, ErrState) {
						t.Fatalf("%s = %v, want ErrState", op, err)
					}
				}
				if !errors.Is(err, ErrState) && !(op == "Check" && file == "journal" && errors.Is(err, ErrDrift)) {
					t.Fatalf("%s with a corrupt %s = %v, want ErrState", op, file, err)
				}
				if !strings.Contains(err.Error(), bad) {
					t.Errorf("error %q does not name the corrupt file %s", err, bad)
				}
				if f.k.snapshot(t) != host {
					t.Errorf("%s changed the host although it could not read %s", op, bad)
				}
				after := tree(t, f.stateDir())
				if !sameTree(before, after) {
					t.Errorf("%s changed the state although it could not read %s:\nbefore %v\nafter  %v", op, bad, before, after)
				}
			})
		}
	}
}

func TestHostileAttachmentNamesNeverMakeAPathOutsideTheStateDir(t *testing.T) {
	parent := t.TempDir()
	f := newFixture(t)
	f.opts.DataDir = filepath.Join(parent, "data")
	hostile := []Attachment{
		{Network: "../../etc", ContainerID: "../../../tmp/x", IfName: "eth0"},
		{Network: "net1", ContainerID: "a/../../b\x00c", IfName: "../../passwd"},
		{Network: "/", ContainerID: "/etc/shadow", IfName: "\x00"},
		{Network: "..", ContainerID: "..", IfName: ".."},
		{Network: strings.Repeat("n", 4096), ContainerID: "c\nd", IfName: "eth0/../../x"},
	}
	for _, att := range hostile {
		f.add(att, v4a, v6a)
		if _, err := f.assigner().Check(att); err != nil {
			t.Errorf("Check(%q): %v", att.String(), err)
		}
	}
	if err := f.assigner().GC("../../etc", nil); err != nil {
		t.Errorf("GC of a hostile network name: %v", err)
	}
	for _, att := range hostile {
		f.del(att)
	}

	stateDir := f.stateDir() + string(filepath.Separator)
	err := filepath.WalkDir(parent, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == parent || path == f.opts.DataDir || path+string(filepath.Separator) == stateDir {
			return nil
		}
		if !strings.HasPrefix(path, stateDir) {
			t.Errorf("%s was made outside the state directory %s", path, stateDir)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", parent, err)
	}
	assertState(t, f, holdings{})
}

func TestRecoverSweepsStagedWritesACrashLeft(t *testing.T) {
	f := newFixture(t)
	f.add(attA, v4a)
	staged := filepath.Join(f.stateDir(), "tmp", "journal.123456")
	if err := os.WriteFile(staged, []byte(`{"key":`), 0o600); err != nil {
		t.Fatal(err)
	}
	j := `{"key":"` + attA.Key() + `","record":null,"touch":["` + v4a.String() + `"]}`
	if err := os.WriteFile(filepath.Join(f.stateDir(), "journal"), []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}

	f.del(attB)
	assertState(t, f, holdings{})
}
