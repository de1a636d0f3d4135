package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/logbuf"
)

// watching runs Watch until the test ends, and checks it returned cleanly.
func watching(t *testing.T, in *Installer, o WatchOptions) *logbuf.Buffer {
	t.Helper()
	logs := &logbuf.Buffer{}
	in.Log = logs.Logger()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := in.Watch(ctx, o); err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return logs
}

func (n *node) chained(t *testing.T, name string) func() bool {
	return func() bool {
		b, err := os.ReadFile(filepath.Join(n.conf, name))
		return err == nil && slices.Contains(pluginTypes(t, b), "external-ip")
	}
}

// rewrite replaces a file the way primaries do: a temp file renamed in
// (Calico, Cilium) or renamed from outside the directory (the AWS VPC CNI).
func rewrite(t *testing.T, dir, name, data, via string) {
	t.Helper()
	tmp := filepath.Join(via, "."+name+".new")
	writeFile(t, tmp, data, 0o644)
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// watchSettle is the rewrite test's settle time, set so that the test
// knows how long the watch's own events may linger.
const watchSettle = 100 * time.Millisecond

func TestWatchRechainsWithinASecondWhenThePrimaryRewritesOrReplacesItsFile(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	watching(t, in, WatchOptions{Resync: time.Hour, Settle: watchSettle})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	outside := t.TempDir()
	for _, c := range []struct{ how, via string }{{"rename in from the conf dir", n.conf}, {"rename in from outside", outside}, {"write in place", ""}} {
		// Past the settle time, the events of the watch's own last
		// rewrite are spent: each case is re-chained by its own event.
		time.Sleep(3 * watchSettle)
		if c.via == "" {
			writeFile(t, filepath.Join(n.conf, "10-bridge.conflist"), bridgeList, 0o644)
		} else {
			rewrite(t, n.conf, "10-bridge.conflist", bridgeList, c.via)
		}
		took := eventually(t, 5*time.Second, c.how, n.chained(t, "10-bridge.conflist"))
		t.Logf("%s: re-chained in %s", c.how, took)
		if took > time.Second {
			t.Errorf("%s: re-chained in %s, want within a second", c.how, took)
		}
	}
}

func TestWatchFollowsThePrimaryWhenItsFileIsRenamedAway(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	n.put(t, "20-next.conflist", strings.ReplaceAll(bridgeList, "pods", "next"), 0o644)
	watching(t, n.installer(t), WatchOptions{Resync: time.Hour})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	if err := os.Rename(filepath.Join(n.conf, "10-bridge.conflist"), filepath.Join(t.TempDir(), "moved")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "chaining the next config after the first moved out", n.chained(t, "20-next.conflist"))
}

func TestWatchWaitsForAPrimaryAndSaysSo(t *testing.T) {
	n := newNode(t)
	logs := watching(t, n.installer(t), WatchOptions{Resync: time.Hour})
	eventually(t, 10*time.Second, "the waiting log line", func() bool {
		return strings.Contains(logs.String(), "waiting for a primary network config")
	})
	if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); err != nil {
		t.Errorf("binary not installed while waiting: %v", err)
	}
	rewrite(t, n.conf, "10-bridge.conf", bridgeConf, t.TempDir())
	// The .conflist is written before the .conf goes: wait for both.
	converted := func() bool {
		_, err := os.Stat(filepath.Join(n.conf, "10-bridge.conf"))
		return os.IsNotExist(err) && n.chained(t, "10-bridge.conflist")()
	}
	eventually(t, 5*time.Second, "chaining the primary once it appears, as a .conflist alone", converted)
	if c := strings.Count(logs.String(), "waiting for a primary"); c != 1 {
		t.Errorf("said it was waiting %d times; once is enough", c)
	}
}

func TestWatchBacksOffARewriteStormAndNamesTheFile(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	logs := watching(t, n.installer(t), WatchOptions{Resync: time.Hour, StormLimit: 3, StormWindow: time.Minute, MaxBackoff: 2 * time.Second})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	// A primary that rewrites its file whenever ours appears: each round
	// is one fight, until the watcher says it is in a storm. How often it
	// re-chains is counted on a clock of the test's own, below.
	stormed := func() bool { return strings.Contains(logs.String(), "rewrite storm") }
	fights := 0
	eventually(t, 30*time.Second, "a storm line after 3 fights", func() bool {
		if n.chained(t, "10-bridge.conflist")() {
			rewrite(t, n.conf, "10-bridge.conflist", bridgeList, n.conf)
			fights++
		}
		return stormed()
	})
	log := logs.String()
	if !strings.Contains(log, filepath.Join(n.conf, "10-bridge.conflist")) || !strings.Contains(log, `"rewrites":`) || !strings.Contains(log, `"every":`) {
		t.Fatalf("the storm line does not name the file and the count after %d fights:\n%s", fights, log)
	}
	if fights < 3 {
		t.Errorf("a storm declared after %d fights, want the limit, 3", fights)
	}
}

// The back-off itself, on the test's clock: every fight is one re-chain,
// and the wait before the next is counted, not timed, so that neither a
// slow nor a fast machine changes what the test sees.
func TestARewriteStormsBackOffDoublesFromASecondUpToTheCap(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	in.Log = (&logbuf.Buffer{}).Logger()
	o := WatchOptions{StormLimit: 3, StormWindow: time.Minute, MaxBackoff: 4 * time.Second}
	o.defaults()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	wt := newWatcher(in, o)
	wt.now = func() time.Time { return now }
	wt.reconcile(context.Background(), now)
	var waits []time.Duration
	for range 7 {
		rewrite(t, n.conf, "10-bridge.conflist", bridgeList, n.conf)
		now = now.Add(wt.delay(o.Settle)) // the timer fires
		wt.reconcile(context.Background(), now)
		if !n.chained(t, "10-bridge.conflist")() {
			t.Fatalf("fight %d: the watcher did not chain again", len(waits)+1)
		}
		waits = append(waits, wt.delay(o.Settle))
	}
	s := o.Settle
	want := []time.Duration{s, s, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("waits after each fight %v, want %v: the settle time until the limit (3), then doubling from 1s up to the cap (4s)", waits, want)
	}
}

func TestStoppingTheWatchLeavesEverythingInstalled(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	in := n.installer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in.Watch(ctx, WatchOptions{}) }()
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch: %v", err)
	}
	if err := in.Check(); err != nil {
		t.Errorf("after the watch stopped: %v; leaving the pod must not uninstall", err)
	}
}

// configMap lays out a ConfigMap volume as kubelet does: plugin.json is a
// link into ..data, itself a link to a timestamped directory, and an
// update swaps ..data with one rename.
type configMap struct{ dir string }

func newConfigMap(t *testing.T, entry string) *configMap {
	c := &configMap{dir: t.TempDir()}
	c.update(t, entry)
	if err := os.Symlink("..data/plugin.json", filepath.Join(c.dir, "plugin.json")); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *configMap) file() string { return filepath.Join(c.dir, "plugin.json") }

func (c *configMap) update(t *testing.T, entry string) {
	t.Helper()
	ts, err := os.MkdirTemp(c.dir, "..2026_")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "plugin.json"), entry, 0o644)
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestWatchChainsTheNewEntryWhenItsConfigMapChangesAndKeepsTheLastGoodOne(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	cm := newConfigMap(t, entryJSON)
	in := n.installer(t)
	logs := watching(t, in, WatchOptions{Resync: time.Hour, EntryFile: cm.file()})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	has := func(s string) func() bool {
		return func() bool { return strings.Contains(string(n.read(t, "10-bridge.conflist")), s) }
	}
	cm.update(t, strings.Replace(entryJSON, "192.0.2.0/24", "198.51.100.0/24", 1))
	eventually(t, 5*time.Second, "the new allowedRanges chained", has("198.51.100.0/24"))
	cm.update(t, `{"type": "external-ip", "allowedRanges": ["not a cidr"]}`)
	eventually(t, 5*time.Second, "the bad entry logged", func() bool { return strings.Contains(logs.String(), "plugin entry not reloaded") })
	if !has("198.51.100.0/24")() || has("not a cidr")() {
		t.Errorf("a bad entry replaced the last good one:\n%s", n.read(t, "10-bridge.conflist"))
	}
	if strings.Contains(logs.String(), "rewrite storm") {
		t.Errorf("an entry change counted as a fight:\n%s", logs)
	}
}

// The node's upkeep is told each new entry the watch reloads, and only
// those: a bad one, or the same one again, is not news.
func TestWatchTellsTheUpkeepEachNewEntryItReloads(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	cm := newConfigMap(t, entryJSON)
	var mu sync.Mutex
	var told []string
	onEntry := func(e *Entry) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, fmt.Sprintf("%s %#x %v", e.DataDir(), e.UplinkRouting().Route.Mask, e.UplinkRouting().Gateways))
	}
	logs := watching(t, n.installer(t), WatchOptions{Resync: time.Hour, EntryFile: cm.file(), OnEntry: onEntry})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	next := strings.Replace(entryJSON, `"allowedRanges"`, `"dataDir": "/run/eip-next", "uplinkRouting": {"mark": "0xf00000", "gateways": {"up1": ["192.0.2.254"]}}, "allowedRanges"`, 1)
	cm.update(t, next)
	eventually(t, 5*time.Second, "the new entry chained", func() bool { return strings.Contains(string(n.read(t, "10-bridge.conflist")), "/run/eip-next") })
	cm.update(t, next)
	time.Sleep(5 * 100 * time.Millisecond) // settled and reconciled apart from the next update
	cm.update(t, `{"type": "external-ip", "allowedRanges": ["not a cidr"]}`)
	eventually(t, 5*time.Second, "the bad entry logged", func() bool { return strings.Contains(logs.String(), "plugin entry not reloaded") })
	mu.Lock()
	defer mu.Unlock()
	if want := "/run/eip-next 0xf00000 map[up1:[192.0.2.254]]"; len(told) != 1 || told[0] != want {
		t.Errorf("the upkeep was told %q, want once %q", told, want)
	}
}

// The entry changed before the watch began (kubelet swapped the ConfigMap
// in while the process started): no event will come for it, so the first
// reconcile reads it, as each resync does.
func TestAnEntryChangedBeforeTheWatchBeganIsReloaded(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	cm := newConfigMap(t, entryJSON)
	in := n.installer(t)
	in.Log = (&logbuf.Buffer{}).Logger()
	var told []string
	o := WatchOptions{EntryFile: cm.file(), OnEntry: func(e *Entry) { told = append(told, e.DataDir()) }}
	o.defaults()
	wt := newWatcher(in, o)
	cm.update(t, strings.Replace(entryJSON, `"allowedRanges"`, `"dataDir": "/run/eip-next", "allowedRanges"`, 1))
	wt.reconcile(context.Background(), time.Now())
	if !slices.Equal(told, []string{"/run/eip-next"}) {
		t.Fatalf("the first reconcile told %v; want the entry as it is now", told)
	}
	wt.reconcile(context.Background(), time.Now())
	if len(told) != 1 {
		t.Errorf("a reconcile with the entry unchanged told %v; want nothing more", told)
	}
}

// A watcher that starts after an uninstall (a new DaemonSet) is a decision
// to install: it clears the mark that the old, still running, watcher
// obeys, and chains again; the old one stays idle.
func TestAWatchStartedAfterUninstallInstallsAgain(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	old := watching(t, n.installer(t), WatchOptions{Resync: time.Hour})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	if err := n.installer(t).Uninstall(); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	eventually(t, 5*time.Second, "the old watcher obeying the mark", func() bool { return strings.Contains(old.String(), "external-ip uninstall ran") })
	if _, err := os.Stat(filepath.Join(n.conf, undoDir, markName)); err != nil {
		t.Fatalf("the mark is gone while a watcher obeys it: %v", err)
	}
	watching(t, n.installer(t), WatchOptions{Resync: time.Hour})
	eventually(t, 10*time.Second, "the new watcher chaining", n.chained(t, "10-bridge.conflist"))
	if _, err := os.Stat(filepath.Join(n.conf, undoDir, markName)); !os.IsNotExist(err) {
		t.Errorf("the new watcher left the mark (%v)", err)
	}
}

// The runtime runs the binary on every pod ADD: removed or replaced (a
// node image reset, another CNI's installer cleaning the bin dir), every
// ADD of the node fails until it is back. The watch puts it back within a
// second of the event, not at the next resync, and its own write of the
// binary raises no further write.
func TestWatchRestoresARemovedBinaryWithinASecond(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	logs := watching(t, n.installer(t), WatchOptions{Resync: 30 * time.Second, Settle: watchSettle})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	bin := filepath.Join(n.bin, BinaryName)
	want, _ := os.ReadFile(n.exe)
	restored := func() bool {
		b, err := os.ReadFile(bin)
		fi, serr := os.Stat(bin)
		return err == nil && serr == nil && string(b) == string(want) && fi.Mode().Perm() == 0o755
	}
	for _, c := range []struct {
		how    string
		change func()
	}{
		{"removed", func() { os.Remove(bin) }},
		{"replaced with other bytes", func() { rewrite(t, n.bin, BinaryName, "#!/bin/sh\n# someone else's\n", t.TempDir()) }},
		{"written over in place", func() { writeFile(t, bin, "#!/bin/sh\n# truncated", 0o755) }},
		// Its bytes are ours, but no runtime can run it.
		{"made not executable", func() { os.Chmod(bin, 0o644) }},
	} {
		time.Sleep(3 * watchSettle) // the events of the last restore are spent
		c.change()
		took := eventually(t, 5*time.Second, "the binary "+c.how+" restored", restored)
		t.Logf("binary %s: restored in %s", c.how, took)
		if took > 2*time.Second {
			t.Errorf("binary %s: restored in %s, want within a second or two, not at the resync (30s)", c.how, took)
		}
	}
	// Our own rename of the binary is an event in the bin dir: it must not
	// raise another write (a loop), nor count as a fight.
	fi, _ := os.Stat(bin)
	time.Sleep(10 * watchSettle)
	if fi2, err := os.Stat(bin); err != nil || !os.SameFile(fi, fi2) {
		t.Errorf("the binary was written again with nothing changed (%v): the watch answers its own write", err)
	}
	if c := strings.Count(logs.String(), "installed the plugin binary"); c != 5 {
		t.Errorf("the binary was written %d times, want 5 (the install and four restores):\n%s", c, logs)
	}
	if strings.Contains(logs.String(), "rewrite storm") {
		t.Errorf("four restores counted as a storm:\n%s", logs)
	}
}

// Two writers of the binary (an old and a new DaemonSet pod of another
// version, a package manager) would otherwise replace each other's binary
// as fast as the events come: the fight is a storm like a config's,
// logged with the binary's path, and backed off.
func TestWatchBacksOffAFightOverTheBinaryAndNamesIt(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	logs := watching(t, n.installer(t), WatchOptions{Resync: time.Hour, StormLimit: 3, StormWindow: time.Minute, MaxBackoff: 2 * time.Second})
	eventually(t, 10*time.Second, "first chain", n.chained(t, "10-bridge.conflist"))
	bin := filepath.Join(n.bin, BinaryName)
	want, _ := os.ReadFile(n.exe)
	fights := 0
	eventually(t, 30*time.Second, "a storm line after 3 fights over the binary", func() bool {
		if b, err := os.ReadFile(bin); err == nil && string(b) == string(want) {
			rewrite(t, n.bin, BinaryName, fmt.Sprintf("#!/bin/sh\n# the other writer's, %d\n", fights), t.TempDir())
			fights++
		}
		return strings.Contains(logs.String(), "rewrite storm")
	})
	if !strings.Contains(logs.String(), bin) || fights < 3 {
		t.Errorf("after %d fights, the storm line does not name the binary %s:\n%s", fights, bin, logs)
	}
}

// A watcher that finds the first file half-written looks again, with no
// event, once that file would have settled: still broken then, it is
// passed over as the runtime passes over it, and said so once, rather
// than waited for forever.
func TestAWatchLooksAgainAtAHalfWrittenPrimaryOnceItWouldHaveSettled(t *testing.T) {
	n := newNode(t)
	n.put(t, "99-loopback.conf", loopbackConf, 0o644)
	writeFile(t, filepath.Join(n.conf, "10-calico.conflist"), "", 0o644)
	in := n.installer(t)
	logs := &logbuf.Buffer{}
	in.Log = logs.Logger()
	o := WatchOptions{}
	o.defaults()
	wt := newWatcher(in, o)
	wt.reconcile(context.Background(), time.Now())
	if wt.retry != settleBroken || n.chained(t, "99-loopback.conflist")() {
		t.Fatalf("over a half-written first file: look again in %s, want %s, and chain nothing", wt.retry, settleBroken)
	}
	settle(t, n.conf) // the time passes; the file stays empty
	for range 2 {
		wt.retry = 0
		wt.reconcile(context.Background(), time.Now())
	}
	if !n.chained(t, "99-loopback.conflist")() {
		t.Errorf("a first file broken for good was not passed over: the runtime loads 99-loopback.conf")
	}
	if c := strings.Count(logs.String(), "passed over network configs"); c != 1 || !strings.Contains(logs.String(), "10-calico.conflist: ") {
		t.Errorf("passing over 10-calico.conflist said %d times, want once, naming it:\n%s", c, logs)
	}
}
