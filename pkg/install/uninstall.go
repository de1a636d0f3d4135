package install

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/install/internal/cniconf"
)

// Uninstall restores every conf dir file we changed, removes the binary
// we installed and then the undo file. Run again after a kill, it finishes.
// It first marks the conf dir, so that a watcher still running chains
// nothing more (see mark.go). Without the undo file it removes what is
// provably ours and fails naming what it had to leave.
func (i *Installer) Uninstall() error {
	unlock, err := lockDir(i.ConfDir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := joinLine(sweepTemps(i.BinDir), sweepTemps(i.ConfDir)); err != nil {
		return err
	}
	st := i.store()
	if err := st.mark(time.Now()); err != nil {
		return err
	}
	u, err := st.loadIfAny()
	if err != nil {
		return err
	}
	if u != nil {
		err = i.undoRecorded(st, u)
	} else {
		err = i.undoUnrecorded()
	}
	if err != nil {
		return err
	}
	var kept []string
	if i.Retire {
		if kept, err = i.retire(i.retireDataDir(u)); err != nil {
			return err
		}
	}
	line, err := st.leave()
	for _, k := range append(kept, line) {
		if k != "" {
			i.log().Warn(k)
		}
	}
	return err
}

// undoRecorded carries out the undo file and removes it.
func (i *Installer) undoRecorded(st undoStore, u *undo) error {
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
	if u.Binary != nil && !u.Binary.Preexisting {
		if err := i.removeBinary(u.Binary); err != nil {
			return err
		}
	}
	return st.remove()
}

// undoUnrecorded is an uninstall without the undo file (deleted by hand,
// or a conf dir copied without it): nothing says what the files were, so
// it removes what is provably ours, our entries from the lists and, when
// it found one (so an install of ours ran), a binary identical to this
// one; it fails naming what it had to leave. With no entry of ours
// chained, a binary is left alone: it may be a package's, kept by an
// earlier uninstall that then removed its undo file.
func (i *Installer) undoUnrecorded() error {
	left, removed, err := i.unchainAll()
	if err != nil {
		return err
	}
	if removed > 0 {
		l, err := i.removeOurBinary()
		if err != nil {
			return err
		}
		if l != "" {
			left = append(left, l)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("no undo file %s, so left: %s", i.store().path(), strings.Join(left, "; "))
	}
	return nil
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
		cur, meta, err := readRegular(i.ConfDir, name)
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
			if err := writeAtomic(i.ConfDir, name, stripped, m, i.fault); err != nil {
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

// removeOurBinary removes the bin dir's binary when it is byte for byte
// this installer's; otherwise it says why it stays.
func (i *Installer) removeOurBinary() (string, error) {
	path := filepath.Join(i.BinDir, BinaryName)
	cur, _, err := readRegular(i.BinDir, BinaryName)
	if err != nil || cur == nil {
		return "", err
	}
	want, err := i.exeBytes()
	if err != nil {
		return "", err
	}
	if !bytes.Equal(cur, want) {
		return fmt.Sprintf("binary %s (sha256 %.12s): not this uninstaller's (sha256 %.12s), so not provably ours; run the uninstall of the binary that installed it, or remove it by hand",
			path, digest(cur), digest(want)), nil
	}
	if err := removeFile(i.BinDir, BinaryName, i.fault); err != nil {
		return "", err
	}
	i.log().Info("removed the plugin binary (no undo file; identical to this one)", "path", path)
	return "", nil
}

// removeBinary removes the binary we installed, and leaves one that
// someone else put in its place since: theirs, as a changed config is.
func (i *Installer) removeBinary(b *binaryUndo) error {
	path := filepath.Join(i.BinDir, BinaryName)
	cur, _, err := readRegular(i.BinDir, BinaryName)
	switch {
	case err != nil || cur == nil:
		return err
	case !b.ours(cur):
		i.log().Warn("binary replaced by someone else since we wrote it: left as it is", "path", path)
		return nil
	}
	if err := removeFile(i.BinDir, BinaryName, i.fault); err != nil {
		return err
	}
	i.log().Info("removed the plugin binary", "path", path)
	return nil
}

func (i *Installer) restore(name string, f *fileUndo) error {
	cur, meta, err := readRegular(i.ConfDir, name)
	switch {
	case err != nil:
		return err
	case f.restored(cur):
		return nil
	case f.ours(cur) && f.Original == nil:
		i.log().Info("removed the config we created", "file", name)
		return removeFile(i.ConfDir, name, i.fault)
	case f.ours(cur):
		i.log().Info("restored the original config", "file", name)
		return i.putBack(name, f)
	}
	if stripped, had := unchainList(cur); had {
		i.log().Warn("config changed by someone else since we wrote it: removing only our entry", "file", name)
		m := *meta
		m.MTime = time.Time{}
		return writeAtomic(i.ConfDir, name, stripped, m, i.fault)
	}
	i.log().Warn("config changed by someone else since we wrote it: left as it is", "file", name)
	return nil
}

// putBack writes the original bytes with their mode, owner and mtime.
func (i *Installer) putBack(name string, f *fileUndo) error {
	return writeAtomic(i.ConfDir, name, f.Original, f.Meta, i.fault)
}
