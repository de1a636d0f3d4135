package assigner

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzStateFiles puts arbitrary bytes where a record, an index entry and a
// journal live, then runs every operation over them. None may panic; each
// either works or fails with ErrState naming a file of the state directory,
// never resets state silently.
func FuzzStateFiles(f *testing.F) {
	f.Add([]byte(`{"network":"net1","containerID":"ctr-a","ifName":"eth0","ips":["198.51.100.1"]}`),
		[]byte(`{"holders":["`+attA.Key()+`"],"uplink":"eth0"}`),
		[]byte(`{"key":"`+attA.Key()+`","record":null,"touch":["198.51.100.1"]}`))
	f.Add([]byte(`{"ips":["2001:db8::1","not-an-ip"]}`), []byte(`{"holders":"x"}`), []byte(`null`))
	f.Add([]byte(``), []byte(`{}`), []byte(`{"key":"../../x","record":{"ips":["198.51.100.2"]},"touch":[],"uplinks":{"198.51.100.2":"eth9"}}`))
	f.Fuzz(func(t *testing.T, rec, index, journal []byte) {
		fx := newFixture(t)
		fx.add(attB, v4b)
		dir := fx.stateDir()
		write(t, filepath.Join(dir, "att", attA.Key()+".json"), rec)
		write(t, filepath.Join(dir, "ip", v4a.String()+".json"), index)
		write(t, filepath.Join(dir, "journal"), journal)
		ops := map[string]func(a *Assigner) error{
			"Del":    func(a *Assigner) error { return a.Del(attA) },
			"Add":    func(a *Assigner) error { _, err := a.Add(attA, []netip.Addr{v4a}, nil); return err },
			"Check":  func(a *Assigner) error { _, err := a.Check(attA); return err },
			"GC":     func(a *Assigner) error { return a.GC("net1", []Attachment{attB}) },
			"Repair": func(a *Assigner) error { _, err := a.Repair(); return err },
			"Report": func(a *Assigner) error { _, err := a.Report(); return err },
		}
		for name, op := range ops {
			err := op(fx.assigner())
			if err == nil || errors.Is(err, ErrDrift) || errors.Is(err, ErrRefused) {
				continue
			}
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("%s over fuzzed state: %v; want success or ErrState naming a file under %s", name, err, dir)
			}
		}
	})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
