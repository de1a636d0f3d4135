package assigner

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/host"
)

const testDevice = "eip0"

// The formats package host marks with, spelled out so that a change of
// them fails here: the alias of holders made before the alias named the
// dataDir, the temporary name a holder is made under, the hashed alias
// of a long dataDir, and the kernel's limit of an alias (IFALIASZ less
// its NUL).
const (
	testLegacyAlias = host.HolderMark + "managed by the external-ip CNI plugin"
	testTempPrefix  = "eipnew"
	testHashAlias   = host.HolderMark + "state sha256:"
	testMaxAlias    = 255
)

// Addresses the fake host routes through eth0 (and, for v4other, eth1).
var (
	v4a     = netip.MustParseAddr("198.51.100.1")
	v4b     = netip.MustParseAddr("198.51.100.2")
	v4c     = netip.MustParseAddr("198.51.100.3")
	v4other = netip.MustParseAddr("203.0.113.5")
	v6a     = netip.MustParseAddr("2001:db8::1")
	v6b     = netip.MustParseAddr("2001:db8::2")
)

var (
	attA = Attachment{Network: "net1", ContainerID: "ctr-a", IfName: "eth0"}
	attB = Attachment{Network: "net1", ContainerID: "ctr-b", IfName: "eth0"}
	attC = Attachment{Network: "net2", ContainerID: "ctr-c", IfName: "eth0"}
)

// hooks is a test's Announcer: probe and announce, each nil for nothing.
// A probe runs only with Options.Probe set (the fixture's probing does).
type hooks struct {
	probe    func(announce.Target) error
	announce func([]announce.Target) error
}

func (h hooks) Probe(t announce.Target, _ time.Duration) error {
	if h.probe == nil {
		return nil
	}
	return h.probe(t)
}

func (h hooks) Announce(ts []announce.Target) error {
	if h.announce == nil {
		return nil
	}
	return h.announce(ts)
}

// probing makes the fixture's Assigners probe the IPs they take first.
func (f *fixture) probing() { f.opts.Probe = time.Millisecond }

// fixture is one host (the fake kernel) and one data directory, from which
// each call makes a fresh Assigner, as each plugin invocation does.
type fixture struct {
	t    testing.TB
	k    *fakeKernel
	opts Options
}

func newFixture(t testing.TB) *fixture {
	return &fixture{
		t:    t,
		k:    newFakeKernel(t),
		opts: Options{Device: testDevice, DataDir: filepath.Join(t.TempDir(), "data"), LockTimeout: 30 * time.Second},
	}
}

// assigner returns a fresh Assigner whose step function does nothing, whatever
// the build tags.
func (f *fixture) assigner() *Assigner {
	a := newAssigner(f.opts, f.k)
	a.step = func(string) {}
	return a
}

func (f *fixture) stateDir() string { return filepath.Join(f.opts.DataDir, f.opts.Device) }

func (f *fixture) add(att Attachment, ips ...netip.Addr) []Placed {
	f.t.Helper()
	// Closed after, as the plugin's process ends: a runner lock it
	// claimed and did not hand to a child is let go.
	a := f.assigner()
	defer a.Close()
	placed, err := a.Add(att, ips, nil)
	if err != nil {
		f.t.Fatalf("Add(%s, %v): %v", att, ips, err)
	}
	return placed
}

func (f *fixture) del(att Attachment) {
	f.t.Helper()
	a := f.assigner()
	defer a.Close()
	if err := a.Del(att); err != nil {
		f.t.Fatalf("Del(%s): %v", att, err)
	}
}

// forget runs the queued conntrack clean-ups, as the plugin's detached
// child does after a DEL.
func (f *fixture) forget() {
	f.t.Helper()
	if err := f.assigner().Conntrack().Run(); err != nil {
		f.t.Fatalf("Run of the conntrack queue: %v", err)
	}
}

func (f *fixture) holderAddrs() []netip.Addr {
	f.t.Helper()
	return f.k.addrs(f.t, f.opts.Device)
}

// holdings is what each attachment should hold: the truth a test compares
// the state files and the host with.
type holdings map[Attachment][]netip.Addr

// held maps each IP to the sorted keys of its holders.
func (h holdings) held() map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for a, ips := range h {
		for _, ip := range ips {
			if !slices.Contains(out[ip], a.Key()) {
				out[ip] = append(out[ip], a.Key())
			}
		}
	}
	for _, keys := range out {
		slices.Sort(keys)
	}
	return out
}

// disk is the state directory as read straight from its files.
type disk struct {
	records  map[string]record
	index    map[netip.Addr]ipEntry
	journal  bool
	creating bool
	tmp      []string
}

func readDisk(t testing.TB, dir string) disk {
	t.Helper()
	d := disk{records: map[string]record{}, index: map[netip.Addr]ipEntry{}}
	for _, name := range dirNames(t, filepath.Join(dir, "att")) {
		var r record
		decodeFile(t, filepath.Join(dir, "att", name), &r)
		d.records[strings.TrimSuffix(name, ".json")] = r
	}
	for _, name := range dirNames(t, filepath.Join(dir, "ip")) {
		ip, err := netip.ParseAddr(strings.TrimSuffix(name, ".json"))
		if err != nil {
			t.Fatalf("index file %s is not named for an IP", name)
		}
		var e ipEntry
		decodeFile(t, filepath.Join(dir, "ip", name), &e)
		d.index[ip] = e
	}
	d.journal = exists(t, filepath.Join(dir, "journal"))
	d.creating = exists(t, filepath.Join(dir, "creating-device"))
	d.tmp = dirNames(t, filepath.Join(dir, "tmp"))
	return d
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func decodeFile(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("state file %s does not decode: %v", path, err)
	}
}

func exists(t testing.TB, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat %s: %v", path, err)
	}
	return err == nil
}

// assertState fails the test unless the state files and the host agree
// with want exactly: one record per attachment with its IPs, an index entry
// per held IP listing exactly its holders, the holder carrying exactly the
// held IPs, each held IPv6 IP proxied on its uplink, nothing pending.
func assertState(t testing.TB, f *fixture, want holdings) {
	t.Helper()
	d := readDisk(t, f.stateDir())
	if d.journal {
		t.Errorf("a journal is still pending in %s", f.stateDir())
	}
	if d.creating {
		t.Errorf("the creating-device marker is still in %s", f.stateDir())
	}
	if len(d.tmp) > 0 {
		t.Errorf("staged writes left in tmp/: %v", d.tmp)
	}
	assertRecords(t, d, want)
	assertIndex(t, d, want)
	assertHost(t, f, d, want)
}

func assertRecords(t testing.TB, d disk, want holdings) {
	t.Helper()
	for att, ips := range want {
		r, ok := d.records[att.Key()]
		if !ok {
			t.Errorf("record of %s is lost", att)
			continue
		}
		if r.Attachment != att {
			t.Errorf("record %s names %s, want %s", att.Key(), r.Attachment, att)
		}
		if got, w := sorted(r.IPs), sorted(ips); !slices.Equal(got, w) {
			t.Errorf("record of %s holds %v, want %v", att, got, w)
		}
	}
	for key, r := range d.records {
		if _, ok := want[r.Attachment]; !ok || r.Attachment.Key() != key {
			t.Errorf("record %s of %s holding %v is invented", key, r.Attachment, r.IPs)
		}
	}
}

func assertIndex(t testing.TB, d disk, want holdings) {
	t.Helper()
	held := want.held()
	for ip, keys := range held {
		e, ok := d.index[ip]
		if !ok {
			t.Errorf("%s is held by %v but has no index entry", ip, keys)
			continue
		}
		if !slices.Equal(e.Holders, keys) {
			t.Errorf("index of %s lists holders %v, want %v", ip, e.Holders, keys)
		}
		if e.Uplink == "" {
			t.Errorf("index of %s names no uplink", ip)
		}
	}
	for ip, e := range d.index {
		if _, ok := held[ip]; !ok {
			t.Errorf("index entry of %s lists holders %v but no record holds it", ip, e.Holders)
		}
	}
}

func assertHost(t testing.TB, f *fixture, d disk, want holdings) {
	t.Helper()
	held := want.held()
	wantAddrs := sorted(keys(held))
	if got := f.holderAddrs(); !slices.Equal(got, wantAddrs) {
		t.Errorf("holder %s carries %v, want exactly the held IPs %v", f.opts.Device, got, wantAddrs)
	}
	if len(wantAddrs) > 0 {
		l := f.k.link(t, f.opts.Device)
		if l.Alias != host.HolderAlias(host.CanonicalDir(f.opts.DataDir)) || !l.Up {
			t.Errorf("holder %s: alias %q up %v, want it marked and up", l.Name, l.Alias, l.Up)
		}
	}
	for _, uplink := range []string{"eth0", "eth1"} {
		var wantProxies []netip.Addr
		for ip := range held {
			if ip.Is6() && d.index[ip].Uplink == uplink {
				wantProxies = append(wantProxies, ip)
			}
		}
		if got, w := f.k.proxies(t, uplink), sorted(wantProxies); !slices.Equal(got, w) {
			t.Errorf("proxy entries on %s are %v, want exactly the held IPv6 IPs announced there %v", uplink, got, w)
		}
	}
}

// assertUntouched fails unless the device's state directory does not exist
// and no holder device was made.
func assertUntouched(t testing.TB, f *fixture) {
	t.Helper()
	if exists(t, f.stateDir()) {
		t.Errorf("state directory %s was created; files: %v", f.stateDir(), tree(t, f.stateDir()))
	}
	if l := f.k.link(t, f.opts.Device); l != nil {
		t.Errorf("holder device %s was created with %v", l.Name, sortedAddrs(l.Addrs))
	}
	for _, m := range []string{"addAddr", "delAddr", "addProxy", "delProxy"} {
		if n := f.k.count(m); n > 0 {
			t.Errorf("the kernel got %d %s requests", n, m)
		}
	}
}

// tree lists the files under dir with their content, to show what changed.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if e.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = string(b)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("walking %s: %v", dir, err)
	}
	return out
}

func sameTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sorted(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
