package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// WatchOptions tune Watch; zero values take the defaults.
type WatchOptions struct {
	// Settle is how long to wait after a change for the writer's burst to
	// end before chaining again (default 100ms): well within a second.
	Settle time.Duration
	// Resync re-checks without an event, in case one was lost (default 30s).
	Resync time.Duration
	// A file that loses our entry StormLimit times within StormWindow
	// (defaults 5 and 1m) is being fought over: re-chaining backs off,
	// doubling from a second up to MaxBackoff (default 30s).
	StormLimit  int
	StormWindow time.Duration
	MaxBackoff  time.Duration
	// EntryFile, when set, is where the plugin entry came from: when it
	// changes (kubelet swaps a ConfigMap's files in with a rename in its
	// directory) it is read again and the new entry chained. An entry that
	// does not parse is logged and the last good one kept.
	EntryFile string
	// OnEntry, when set, is told each new entry read from EntryFile,
	// before it is chained: the node's upkeep follows it (its dataDir and
	// uplinkRouting), or it would keep repairing what the plugin no
	// longer uses.
	OnEntry func(*Entry)
}

func (o *WatchOptions) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Settle, 100*time.Millisecond)
	def(&o.Resync, 30*time.Second)
	def(&o.StormWindow, time.Minute)
	def(&o.MaxBackoff, 30*time.Second)
	if o.StormLimit <= 0 {
		o.StormLimit = 5
	}
}

// Watch installs, then keeps the chain in place until ctx ends: it chains
// again after every create, write, rename or removal of a config file in
// the conf dir, and of our binary in the bin dir (removed or replaced, it
// fails every ADD of the node until it is back). It never uninstalls:
// leaving the pod must not open a window of pods without external IPs.
func (i *Installer) Watch(ctx context.Context, o WatchOptions) error {
	o.defaults()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", i.ConfDir, err)
	}
	defer w.Close()
	if err := i.waitForDir(ctx, w, o.Resync); err != nil || ctx.Err() != nil {
		return err
	}
	release, err := i.holdWatch()
	if err != nil {
		return err
	}
	defer release()
	dirs := []string{i.ConfDir, i.BinDir}
	if o.EntryFile != "" {
		dirs = append(dirs, filepath.Dir(o.EntryFile))
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("watching %s: %w", d, err)
		}
	}
	return newWatcher(i, o).loop(ctx, w)
}

// waitForDir returns once the conf dir exists: a DaemonSet may start
// before the primary CNI (or the runtime) has made it. It watches the
// deepest ancestor that exists, as each level appears, and looks again
// every poll in case an event was lost.
func (i *Installer) waitForDir(ctx context.Context, w *fsnotify.Watcher, poll time.Duration) error {
	said := false
	for {
		fi, err := os.Stat(i.ConfDir)
		switch {
		case err == nil && fi.IsDir():
			if said {
				i.log().Info("the conf dir exists now", "dir", i.ConfDir)
			}
			return nil
		case err == nil:
			return fmt.Errorf("conf dir %s: is %s, not a directory", i.ConfDir, atomicfile.KindOf(fi.Mode()))
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("conf dir %s: %w", i.ConfDir, err)
		}
		parent := existingAncestor(i.ConfDir)
		if err := w.Add(parent); err != nil {
			return fmt.Errorf("watching %s for the conf dir %s: %w", parent, i.ConfDir, err)
		}
		if !said {
			i.log().Info("waiting for the conf dir; it does not exist yet", "dir", i.ConfDir, "watching", parent)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.Events:
		case <-w.Errors: // lost events: look again
		case <-time.After(min(poll, 2*time.Second)):
		}
		w.Remove(parent)
	}
}

// existingAncestor is the deepest directory of path's ancestors that exists.
func existingAncestor(path string) string {
	for p := filepath.Dir(filepath.Clean(path)); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); (err == nil && fi.IsDir()) || p == filepath.Dir(p) {
			return p
		}
	}
}

// holdWatch takes the watcher's shared lock under the conf dir's lock, so
// that an uninstall, which holds that lock, sees every watcher (mark.go).
// A watcher that starts is a decision to install: it clears the mark of an
// earlier uninstall; from then on a mark stops it.
func (i *Installer) holdWatch() (func(), error) {
	unlock, err := atomicfile.LockDir(i.ConfDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st := i.store()
	if err := st.clearMark(); err != nil {
		return nil, err
	}
	return st.holdWatch()
}

// watcher is Watch's state: when to chain next, and who fights us.
type watcher struct {
	i *Installer
	o WatchOptions
	// now is the clock of the back-off; tests set their own, so that what
	// they count does not depend on the machine's load.
	now     func() time.Time
	due     *time.Timer
	hold    time.Time // storm back-off: no re-chain before this
	backoff time.Duration
	waiting bool // no primary yet, and said so
	// retry: look again in this long, with no event (a primary that may
	// be half-written is passed over if it is still broken then).
	retry   time.Duration
	skipped string // the files passed over, as last said
	// reload: the entry's file may have changed. Besides its directory's
	// events, the first reconcile, each resync and each lost event set it
	// (a change made before the watch began, or in an overflow, has no
	// event); an entry as it was is no change (reloadEntry).
	reload  bool
	chained map[string]bool
	fights  map[string][]time.Time
}

func newWatcher(i *Installer, o WatchOptions) *watcher {
	return &watcher{i: i, o: o, now: time.Now, fights: map[string][]time.Time{}, chained: map[string]bool{}, reload: o.EntryFile != ""}
}

func (wt *watcher) loop(ctx context.Context, w *fsnotify.Watcher) error {
	wt.due = time.NewTimer(0)
	defer wt.due.Stop()
	resync := time.NewTicker(wt.o.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watching %s: the watch ended", wt.i.ConfDir)
			}
			if wt.o.EntryFile != "" && filepath.Dir(ev.Name) == filepath.Dir(wt.o.EntryFile) {
				wt.reload = true
				wt.arm(wt.o.Settle)
			} else if wt.relevant(ev) {
				wt.arm(wt.o.Settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("watching %s: the watch ended", wt.i.ConfDir)
			}
			// An overflow loses events: look at the directory itself.
			wt.i.log().Warn("watch error; checking the conf dir", "dir", wt.i.ConfDir, "error", err)
			wt.reload = wt.o.EntryFile != ""
			wt.arm(wt.o.Settle)
		case <-resync.C:
			wt.reload = wt.o.EntryFile != ""
			wt.arm(0)
		case <-wt.due.C:
			if wt.reconcile(ctx, wt.now()) {
				<-ctx.Done() // uninstalled: idle until stopped, so as not to be restarted
				return nil
			}
			if wt.retry > 0 {
				wt.arm(wt.retry)
				wt.retry = 0
			}
		}
	}
}

// relevant: a config file the runtime would read changed, or our binary
// did, its mode too (a chmod leaves it unrunnable). Our temp files (.tmp)
// and undo directory are not config files. Our own rename of the binary
// is an event too: the install it raises finds the binary in place and
// writes nothing, so it ends there.
func (wt *watcher) relevant(ev fsnotify.Event) bool {
	if ev.Name == filepath.Join(wt.i.BinDir, BinaryName) {
		return ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename|fsnotify.Remove|fsnotify.Chmod) != 0
	}
	return ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename|fsnotify.Remove) != 0 && slices.Contains(confExts, filepath.Ext(ev.Name))
}

// arm schedules a chaining in d, or at the end of a storm back-off.
func (wt *watcher) arm(d time.Duration) {
	d = wt.delay(d)
	wt.due.Stop()
	select { // drain a fire not yet received, so Reset starts afresh
	case <-wt.due.C:
	default:
	}
	wt.due.Reset(d)
}

// delay is d, or longer while a storm back-off lasts.
func (wt *watcher) delay(d time.Duration) time.Duration {
	return max(d, wt.hold.Sub(wt.now()))
}

// reconcile chains again; it says stop once an uninstall has marked the
// conf dir since this watcher started, or once OnEntry, told of a new
// entry, stopped the process (ctx): the process that follows chains it,
// and this one must not hold up its own stop with a chaining.
func (wt *watcher) reconcile(ctx context.Context, now time.Time) (stop bool) {
	if wt.reload {
		wt.reload = false
		wt.reloadEntry()
		if ctx.Err() != nil {
			return true
		}
	}
	res, err := wt.i.install(false)
	switch {
	case errors.Is(err, ErrUninstalled):
		wt.i.log().Info("external-ip uninstall ran: chaining nothing more; idle until stopped", "dir", wt.i.ConfDir, "detail", err.Error())
		return true
	case errors.Is(err, ErrNoPrimary):
		if errors.Is(err, errHalfWritten) {
			wt.retry = settleBroken
		}
		if !wt.waiting {
			wt.i.log().Info("waiting for a primary network config; the primary CNI has not written one yet", "dir", wt.i.ConfDir, "detail", err.Error())
		}
		wt.waiting = true
		return false
	case err != nil:
		wt.i.log().Error("chaining failed; retrying on the next change", "dir", wt.i.ConfDir, "error", err)
		return false
	}
	if wt.waiting {
		wt.i.log().Info("primary network config found", "file", res.Source)
		wt.waiting = false
	}
	if s := strings.Join(res.Skipped, "; "); s != wt.skipped {
		wt.skipped = s
		wt.i.sayPassedOver(res.Skipped)
	}
	if len(res.Wrote) > 0 {
		wt.fought(filepath.Join(wt.i.ConfDir, res.Source), now)
	}
	if res.Binary {
		wt.fought(filepath.Join(wt.i.BinDir, BinaryName), now)
	}
	return false
}

// fought counts a re-chain of a file (a path) we had chained or written
// already: someone wrote it again without our entry, or another binary.
// Past StormLimit in StormWindow it backs off and names the file and how
// often.
func (wt *watcher) fought(file string, now time.Time) {
	if !wt.chained[file] {
		wt.chained[file] = true
		return
	}
	recent := []time.Time{now}
	for _, t := range wt.fights[file] {
		if now.Sub(t) < wt.o.StormWindow {
			recent = append(recent, t)
		}
	}
	wt.fights[file] = recent
	if len(recent) < wt.o.StormLimit {
		wt.backoff = 0
		return
	}
	wt.backoff = min(max(2*wt.backoff, time.Second), wt.o.MaxBackoff)
	wt.hold = now.Add(wt.backoff)
	every := wt.o.StormWindow // one rewrite in the window: at most this often
	if len(recent) > 1 {
		every = now.Sub(slices.MinFunc(recent, time.Time.Compare)) / time.Duration(len(recent)-1)
	}
	wt.i.log().Warn("rewrite storm: another writer keeps replacing the file without our entry (probably the primary CNI) or the binary with another; backing off",
		"file", file, "rewrites", len(recent), "within", wt.o.StormWindow.String(),
		"every", every.Round(time.Millisecond).String(),
		"rechainEvery", wt.backoff.String())
}

// reloadEntry reads the entry's file again; a new entry is chained like a
// rewrite of ours, not counted as a fight.
func (wt *watcher) reloadEntry() {
	data, err := os.ReadFile(wt.o.EntryFile)
	var e *Entry
	if err == nil {
		e, err = ParseEntry(data)
	}
	if err != nil {
		wt.i.log().Error("plugin entry not reloaded; keeping the last good one", "file", wt.o.EntryFile, "error", err)
		return
	}
	if wt.i.Entry != nil && sameJSON(e.raw(), wt.i.Entry.raw()) {
		return
	}
	wt.i.Entry = e
	wt.chained = map[string]bool{}
	wt.i.log().Info("plugin entry changed; chaining it", "file", wt.o.EntryFile)
	if wt.o.OnEntry != nil {
		wt.o.OnEntry(e)
	}
}
