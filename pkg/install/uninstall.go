package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
	"github.com/external-ip/external-ip/pkg/install/internal/cniconf"
)

// Uninstall restores every conf dir file we changed, then removes the
// binary we installed and the undo file. While pods hold external IPs it
// changes nothing and fails (ErrHeld, see refuseWhileHeld), unless Force;
// it first releases the IPs of pods whose network namespace is gone. It
// finishes, unless something is left for a later run: an install --watch
// still running (it obeys the mark, see mark.go), or, with Retire, a
// holder or table kept (no CAP_NET_ADMIN, addresses no record holds).
// Then it keeps the binary and an undo file recording it, since running
// uninstall (or repair) again is the advice, and the binary is what runs
// it; the pods' DELs need it too. Run again, after a kill or once nothing
// is left, it finishes. Without the undo file it removes what is provably
// ours and fails naming what it had to leave.
func (i *Installer) Uninstall() error {
	unlock, err := atomicfile.LockDir(i.ConfDir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := joinLine(atomicfile.SweepTemps(i.BinDir), atomicfile.SweepTemps(i.ConfDir)); err != nil {
		return err
	}
	st := i.store()
	u, err := st.loadIfAny()
	if err != nil {
		return err
	}
	if err := i.refuseWhileHeld(u); err != nil {
		return err
	}
	if err := st.mark(time.Now()); err != nil {
		return err
	}
	var bin *binaryUndo
	var left []string
	if u != nil {
		bin, err = u.Binary, i.restoreFiles(u)
	} else {
		left, bin, err = i.undoUnrecorded()
	}
	if err != nil {
		return err
	}
	kept, err := i.pending(st, u)
	if err == nil && len(kept) > 0 {
		err = i.keepForLater(st, u, bin, kept)
	} else if err == nil {
		err = i.finish(st, bin)
	}
	if err == nil && len(left) > 0 {
		err = fmt.Errorf("no undo file %s, so left: %s", st.path(), strings.Join(left, "; "))
	}
	return err
}

// pending says what a later uninstall is left to do: the holders and table
// retire keeps, and the mark a running watcher obeys. A watcher takes its
// lock under the conf dir's lock, which Uninstall holds: none starts
// meanwhile.
func (i *Installer) pending(st undoStore, u *undo) ([]string, error) {
	var kept []string
	if i.Retire {
		var err error
		if kept, err = i.retire(i.retireDataDir(u)); err != nil {
			return nil, err
		}
	}
	running, err := st.watcherRunning()
	if err != nil {
		return nil, err
	}
	if running {
		kept = append(kept, fmt.Sprintf("kept %s: an install --watch is still running and obeys it (chains nothing more); run uninstall again once it has stopped", st.markPath()))
	}
	return kept, nil
}

// finish removes the binary we installed, or puts back the one that was
// there before, then the undo file and our directory.
func (i *Installer) finish(st undoStore, bin *binaryUndo) error {
	var err error
	switch {
	case bin == nil:
	case bin.Preexisting:
		err = i.restoreBinary(st, bin)
	default:
		err = i.removeBinary(bin)
	}
	if err != nil {
		return err
	}
	if err := st.remove(); err != nil {
		return err
	}
	return st.leave()
}

// keepForLater keeps what the advice to run uninstall again needs: the
// binary, and an undo file recording it (the conf dir's files are
// restored already, so it records none of them), which the later run
// carries out; it says what to run.
func (i *Installer) keepForLater(st undoStore, u *undo, bin *binaryUndo, kept []string) error {
	rest := &undo{Files: map[string]*fileUndo{}, Binary: bin, DataDir: i.retireDataDir(u)}
	if err := st.save(rest); err != nil {
		return err
	}
	run, err := i.rerunPath()
	if err != nil {
		return err
	}
	kept = append(kept, fmt.Sprintf("kept %s for the next run, with %s: run %s uninstall --bin-dir %s --conf-dir %s to finish",
		run, st.path(), run, i.BinDir, i.ConfDir))
	for _, k := range kept {
		i.log().Warn(k)
	}
	return nil
}

// rerunPath is a binary that will still be there for the next run: the
// bin dir's, which keepForLater keeps, else this one.
func (i *Installer) rerunPath() (string, error) {
	path := filepath.Join(i.BinDir, BinaryName)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
		return path, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this binary: %w", err)
	}
	return exe, nil
}

// restoreFiles puts back every conf dir file the undo file records.
func (i *Installer) restoreFiles(u *undo) error {
	names := make([]string, 0, len(u.Files))
	for n := range u.Files {
		names = append(names, n)
	}
	// Put originals back before removing what we created: the runtime
	// always finds a config.
	slices.SortFunc(names, func(a, b string) int {
		ra, rb := u.Files[a].Original == nil, u.Files[b].Original == nil
		if ra != rb {
			return map[bool]int{true: 1, false: -1}[ra]
		}
		return bytes.Compare([]byte(a), []byte(b))
	})
	for _, n := range names {
		if err := i.restore(n, u.Files[n]); err != nil {
			return err
		}
	}
	return nil
}

// undoUnrecorded is an uninstall without the undo file (deleted by hand,
// or a conf dir copied without it): nothing says what the files were, so
// it removes what is provably ours, our entries from the lists, and, when
// it found one (so an install of ours ran), takes a binary identical to
// this one as ours (bin); left names what it had to leave. With no entry
// of ours chained, a binary is left alone: it may be a package's, kept by
// an earlier uninstall that then removed its undo file.
func (i *Installer) undoUnrecorded() (left []string, bin *binaryUndo, err error) {
	left, removed, err := i.unchainAll()
	if err != nil || removed == 0 {
		return left, nil, err
	}
	bin, line, err := i.ourBinary()
	if line != "" {
		left = append(left, line)
	}
	return left, bin, err
}

// unchainAll removes our entries from every list of the conf dir; it
// counts the lists it rewrote and names those it could not.
func (i *Installer) unchainAll() (left []string, removed int, err error) {
	paths, err := cniconf.ConfFiles(i.ConfDir, []string{".conflist"})
	if err != nil {
		return nil, 0, fmt.Errorf("listing %s: %w", i.ConfDir, err)
	}
	slices.Sort(paths)
	for _, path := range paths {
		name := filepath.Base(path)
		cur, meta, err := atomicfile.ReadRegular(i.ConfDir, name)
		if err != nil {
			if hasOurEntry(path) {
				left = append(left, fmt.Sprintf("our entry in %s (%v)", path, err))
			}
			continue
		}
		stripped, had := unchainList(cur)
		switch {
		case had:
			m := *meta
			m.MTime = time.Time{}
			if err := atomicfile.WriteChecked(i.ConfDir, name, stripped, m, i.fault, i.stillIs(name, cur)); err != nil {
				return left, removed, err
			}
			removed++
			i.log().Info("removed our entry (no undo file to restore the original from)", "file", path)
		case hasOurEntry(path):
			left = append(left, fmt.Sprintf("%s holds only external-ip entries: not ours to remove", path))
		}
	}
	return left, removed, nil
}

// hasOurEntry says whether the list at path (followed, as the runtime
// reads it) names our plugin.
func hasOurEntry(path string) bool {
	l, err := cniconf.ConfListFromFile(path)
	if err != nil {
		return false
	}
	for _, p := range l.Plugins {
		if p.Network.Type == PluginType {
			return true
		}
	}
	return false
}

// ourBinary records the bin dir's binary as ours when it is byte for
// byte this installer's; otherwise it says why it stays.
func (i *Installer) ourBinary() (*binaryUndo, string, error) {
	path := filepath.Join(i.BinDir, BinaryName)
	cur, _, err := atomicfile.ReadRegular(i.BinDir, BinaryName)
	if err != nil || cur == nil {
		return nil, "", err
	}
	want, err := i.exeBytes()
	if err != nil {
		return nil, "", err
	}
	if !bytes.Equal(cur, want) {
		return nil, fmt.Sprintf("binary %s (sha256 %.12s): not this uninstaller's (sha256 %.12s), so not provably ours; run the uninstall of the binary that installed it, or remove it by hand",
			path, digest(cur), digest(want)), nil
	}
	return &binaryUndo{Wrote: []string{digest(cur)}}, "", nil
}

// removeBinary removes the binary we installed, and leaves one that
// someone else put in its place since: theirs, as a changed config is.
func (i *Installer) removeBinary(b *binaryUndo) error {
	path := filepath.Join(i.BinDir, BinaryName)
	cur, _, err := atomicfile.ReadRegular(i.BinDir, BinaryName)
	switch {
	case err != nil || cur == nil:
		return err
	case !b.ours(cur):
		i.log().Warn("binary replaced by someone else since we wrote it: left as it is", "path", path)
		return nil
	}
	if err := atomicfile.Remove(i.BinDir, BinaryName, i.fault); err != nil {
		return err
	}
	i.log().Info("removed the plugin binary", "path", path)
	return nil
}

// restoreBinary puts back the binary that was there before our first
// install, from its copy, and leaves one that someone else put in place
// of ours since (or removed): theirs, as removeBinary leaves it.
func (i *Installer) restoreBinary(st undoStore, b *binaryUndo) error {
	path := filepath.Join(i.BinDir, BinaryName)
	cur, _, err := atomicfile.ReadRegular(i.BinDir, BinaryName)
	switch {
	case err != nil || b.Original == "" || (cur != nil && digest(cur) == b.Original):
		return err // no copy was kept (an older undo file), or put back already
	case cur == nil || !b.ours(cur):
		i.log().Warn("binary removed or replaced by someone else since we wrote it: left as it is, the one from before our install not put back", "path", path)
		return nil
	}
	orig, err := st.original(b)
	if err != nil || orig == nil || b.Meta == nil {
		i.log().Warn("the copy of the binary from before our install is missing or changed: ours left in place; reinstall the package that owned it", "path", path, "copy", filepath.Join(st.dir, originalName), "error", err)
		return nil
	}
	if err := atomicfile.Write(i.BinDir, BinaryName, orig, *b.Meta, i.fault); err != nil {
		return err
	}
	i.log().Info("put back the binary that was there before our first install", "path", path)
	return nil
}

func (i *Installer) restore(name string, f *fileUndo) error {
	cur, meta, err := atomicfile.ReadRegular(i.ConfDir, name)
	// Each change below goes in only over cur: a rewrite by the primary
	// meanwhile is theirs, and this run fails for the next to judge it.
	unchanged := i.stillIs(name, cur)
	switch {
	case err != nil:
		return err
	case f.restored(cur):
		return nil
	case f.ours(cur) && f.Original == nil:
		i.log().Info("removed the config we created", "file", name)
		return atomicfile.RemoveChecked(i.ConfDir, name, i.fault, unchanged)
	case f.ours(cur):
		i.log().Info("restored the original config", "file", name)
		return atomicfile.WriteChecked(i.ConfDir, name, f.Original, f.Meta, i.fault, unchanged)
	}
	if stripped, had := unchainList(cur); had {
		i.log().Warn("config changed by someone else since we wrote it: removing only our entry", "file", name)
		m := *meta
		m.MTime = time.Time{}
		return atomicfile.WriteChecked(i.ConfDir, name, stripped, m, i.fault, unchanged)
	}
	i.log().Warn("config changed by someone else since we wrote it: left as it is", "file", name)
	return nil
}
