package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// BinaryName is the plugin's file in the bin dir: the CNI type.
const BinaryName = PluginType

// Installer puts the plugin on the node. Every method is idempotent and
// safe to run at any time, also after a kill of an earlier run.
type Installer struct {
	BinDir  string
	ConfDir string
	// Entry is our plugin entry; Uninstall does not need it.
	Entry *Entry
	// Primary names the conf dir file to chain into; empty picks it as the
	// runtime does.
	Primary string
	// Exe is the binary to install; empty is this process's own.
	Exe string
	// Retire lets Uninstall remove the holder devices and the NAT table the
	// plugin leaves, when they are ours and empty, for DataDir (empty: the
	// entry's dataDir that install recorded, else the default). Off, the
	// host is left alone (tests on temp dirs).
	Retire  bool
	DataDir string
	// Force lets Uninstall go on while pods hold external IPs; it says
	// what it leaves held and how to release it (leaveHeld).
	Force bool
	// Assigner is what Uninstall releases the records of pods gone without
	// their DEL with: the plugin's repair assigner, which steers and
	// routes; nil is one that does neither (tests on temp dirs).
	Assigner func(dataDir, device string, log *slog.Logger) *assigner.Assigner
	Log      *slog.Logger

	fault atomicfile.Fault // tests only: kill points
}

// Result says what Install changed; the zero Result is "nothing".
type Result struct {
	Binary  bool     // the binary was written
	Source  string   // the primary config as found, before a conversion
	Primary string   // the file chained into, as named after a conversion
	Wrote   []string // conf dir files written
	Removed []string // conf dir files removed (a .conf turned .conflist)
	// Skipped are the files before the primary that do not load, with
	// why: passed over, as the runtime passes over them.
	Skipped []string
}

// Changed says whether Install wrote or removed anything.
func (r Result) Changed() bool { return r.Binary || len(r.Wrote) > 0 || len(r.Removed) > 0 }

// ErrChanged: a conf dir file changed between the read that a change was
// planned from and the change (the primary CNI rewrote it meanwhile).
var ErrChanged = errors.New("changed while external-ip was rewriting it")

// chainTries bounds the plans made again when the primary keeps rewriting
// its file under us; the watch's next pass (the rewrite's own event) tries
// again.
const chainTries = 3

// op is one planned conf dir change; nil data removes the file.
type op struct {
	name string
	// from is the file as the plan read it (nil: absent): the change is
	// made only over these bytes, and they are what uninstall restores.
	from []byte
	data []byte
	meta atomicfile.Meta
}

func (i *Installer) store() undoStore {
	return undoStore{dir: filepath.Join(i.ConfDir, undoDir), fault: i.fault}
}

func (i *Installer) log() *slog.Logger {
	if i.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return i.Log
}

// Install copies the binary and chains our entry into the primary config.
// It writes nothing when both are in place. With no primary config yet it
// installs the binary and returns an error of kind ErrNoPrimary. It is a
// decision to install: it clears the mark of an earlier uninstall.
func (i *Installer) Install() (Result, error) {
	res, err := i.install(true)
	i.sayPassedOver(res.Skipped)
	return res, err
}

// sayPassedOver names the files before the primary that do not load: the
// runtime passes over them too, but a broken first file is most likely a
// network meant to be the primary.
func (i *Installer) sayPassedOver(skipped []string) {
	if len(skipped) > 0 {
		i.log().Warn("passed over network configs that do not load, as the runtime does: the primary is the first that loads", "dir", i.ConfDir, "skipped", skipped)
	}
}

// install is Install; a watcher, which cleared the mark when it started,
// calls it with fresh false, and then an uninstall's mark stops it
// (ErrUninstalled).
func (i *Installer) install(fresh bool) (Result, error) {
	if i.Entry == nil {
		return Result{}, fmt.Errorf("%w: no plugin entry to install", ErrInvalid)
	}
	unlock, err := atomicfile.LockDir(i.ConfDir)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	if err := joinLine(atomicfile.SweepTemps(i.BinDir), atomicfile.SweepTemps(i.ConfDir)); err != nil {
		return Result{}, err
	}
	st := i.store()
	if err := i.obeyMark(st, fresh); err != nil {
		return Result{}, err
	}
	var res Result
	for try := 1; ; try++ {
		r, err := i.chainOnce(st)
		r.Binary = r.Binary || res.Binary
		res = r
		if !errors.Is(err, ErrChanged) {
			return res, err
		}
		if try == chainTries {
			return res, fmt.Errorf("%w, %d times in a row; the next pass chains it again", err, chainTries)
		}
		i.log().Info("a network config changed while being chained; planning again", "detail", err.Error())
	}
}

// chainOnce plans from the conf dir as it is now and carries the plan out,
// unless a file changes under it (ErrChanged): then the conf dir holds the
// other writer's version, which the next plan starts from. The undo file
// is read afresh for each plan, so that a plan given up leaves no trace.
func (i *Installer) chainOnce(st undoStore) (Result, error) {
	var res Result
	u, err := st.load()
	if err != nil {
		return res, err
	}
	// Plan before writing anything: a primary we cannot chain into leaves
	// the node as it was. With no primary yet the binary goes in, ready.
	p, err := findPrimary(i.ConfDir, i.Primary)
	var ops []op
	if err == nil {
		ops, err = i.plan(p, u)
	}
	if err != nil && !errors.Is(err, ErrNoPrimary) {
		return res, err
	}
	if i.Entry.DataDir() != u.DataDir {
		u.DataDir = i.Entry.DataDir() // saved with the first change below
	}
	var berr error
	if res.Binary, berr = i.installBinary(u, st); berr != nil || err != nil {
		return res, joinLine(berr, err)
	}
	res.Source, res.Primary, res.Skipped = p.name, p.name, p.skipped
	if len(ops) > 0 {
		res.Primary = ops[0].name
	}
	return res, i.apply(u, st, ops, &res)
}

func (i *Installer) obeyMark(st undoStore, fresh bool) error {
	if fresh {
		return st.clearMark()
	}
	return st.marked()
}

// exeBytes is the binary this installer installs.
func (i *Installer) exeBytes() ([]byte, error) {
	exe := i.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding this binary: %w", err)
		}
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		return nil, fmt.Errorf("reading this binary: %w", err)
	}
	return b, nil
}

func (i *Installer) installBinary(u *undo, st undoStore) (bool, error) {
	want, err := i.exeBytes()
	if err != nil {
		return false, err
	}
	cur, meta, err := atomicfile.ReadRegular(i.BinDir, BinaryName)
	// Our bytes that no runtime can run (a chmod) are written again, as
	// other bytes are.
	if err != nil || bytes.Equal(cur, want) && meta.Mode&0o111 != 0 {
		return false, err
	}
	if u.Binary == nil {
		// Not ours: a package's, kept for uninstall to put back.
		u.Binary = &binaryUndo{Preexisting: cur != nil}
		if cur != nil {
			if err := st.keepOriginal(u.Binary, cur, *meta); err != nil {
				return false, err
			}
			cur = nil
		}
	}
	u.Binary.writing(cur, want)
	if err := st.save(u); err != nil {
		return false, err
	}
	ours := atomicfile.Meta{Mode: 0o755, UID: os.Getuid(), GID: os.Getgid()}
	if err := atomicfile.Write(i.BinDir, BinaryName, want, ours, i.fault); err != nil {
		return false, err
	}
	i.log().Info("installed the plugin binary", "path", filepath.Join(i.BinDir, BinaryName), "bytes", len(want))
	return true, nil
}

// plan is what chaining p needs: nothing, a rewrite of a list, or a new
// .conflist written before the single-plugin file it replaces is removed
// (so that the runtime always finds a config, and never two once done).
func (i *Installer) plan(p *primary, u *undo) ([]op, error) {
	meta := p.meta
	meta.MTime = time.Time{} // a change gets a new mtime
	path := filepath.Join(i.ConfDir, p.name)
	if p.list {
		data, err := chainList(path, p.data, i.Entry)
		if err != nil || data == nil {
			return nil, err
		}
		return []op{{name: p.name, from: p.data, data: data, meta: meta}}, nil
	}
	data, err := listFromConf(path, p.data, i.Entry)
	if err != nil {
		return nil, err
	}
	list, err := i.mayReplace(p.name, listName(p.name), u)
	if err != nil {
		return nil, err
	}
	return []op{{name: listName(p.name), from: list, data: data, meta: meta}, {name: p.name, from: p.data}}, nil
}

// mayReplace refuses to turn conf into list over a file that is there and
// not as we wrote it: another network's config, which the runtime would
// lose. It returns list as it read it.
func (i *Installer) mayReplace(conf, list string, u *undo) ([]byte, error) {
	cur, _, err := atomicfile.ReadRegular(i.ConfDir, list)
	if err != nil || cur == nil {
		return nil, err
	}
	if f := u.Files[list]; f != nil && f.ours(cur) {
		return cur, nil
	}
	var l struct {
		Name any `json:"name"`
	}
	json.Unmarshal(cur, &l) // the name only helps the reader
	return nil, fmt.Errorf("%w: converting %s to %s would replace %s (network %s), which external-ip did not write; refusing: move one of them",
		ErrInvalid, filepath.Join(i.ConfDir, conf), list, filepath.Join(i.ConfDir, list), mustMarshal(l.Name))
}

// apply records every op in the undo file, then carries them out.
func (i *Installer) apply(u *undo, st undoStore, ops []op, res *Result) error {
	if len(ops) == 0 {
		return nil
	}
	for _, o := range ops {
		if err := i.record(u, o); err != nil {
			return err
		}
	}
	if err := st.save(u); err != nil {
		return err
	}
	for _, o := range ops {
		unchanged := i.stillIs(o.name, o.from)
		if o.data == nil {
			if err := atomicfile.RemoveChecked(i.ConfDir, o.name, i.fault, unchanged); err != nil {
				return err
			}
			res.Removed = append(res.Removed, o.name)
			continue
		}
		if err := atomicfile.WriteChecked(i.ConfDir, o.name, o.data, o.meta, i.fault, unchanged); err != nil {
			return err
		}
		res.Wrote = append(res.Wrote, o.name)
	}
	i.log().Info("chained external-ip into the primary network config", "file", res.Primary, "wrote", res.Wrote, "removed", res.Removed)
	return nil
}

// stillIs is the check made right before a change of name goes in: the
// file is still want, the bytes the change was planned from. The window
// left is this read and the rename(2), after every fsync. rename is no
// compare-and-swap: a write that lands in that window is replaced and lost
// for good (the file is then ours byte for byte, so the next pass writes
// nothing), until the primary writes its file again. istio-cni's installer
// reads, edits and writes atomically without any such check, and counts
// on its watch to see the next write.
func (i *Installer) stillIs(name string, want []byte) func() error {
	return func() error {
		cur, _, err := atomicfile.ReadRegular(i.ConfDir, name)
		if err == nil && !bytes.Equal(cur, want) {
			err = changed(i.ConfDir, name)
		}
		return err
	}
}

func changed(dir, name string) error {
	return fmt.Errorf("%s: %w", filepath.Join(dir, name), ErrChanged)
}

// record notes what o replaces: the bytes o was planned from, or
// ErrChanged when the file is no longer those. A file still as we left it
// keeps its recorded original; one someone else wrote since becomes the
// original, without any entry of ours that it carries.
func (i *Installer) record(u *undo, o op) error {
	cur, meta, err := atomicfile.ReadRegular(i.ConfDir, o.name)
	if err != nil {
		return err
	}
	if !bytes.Equal(cur, o.from) {
		return changed(i.ConfDir, o.name)
	}
	f := u.Files[o.name]
	switch {
	case f == nil:
		// The first change: the original byte for byte, an external-ip
		// entry that someone wrote by hand included.
		f = &fileUndo{Original: cur}
		if meta != nil {
			f.Meta = *meta
		}
		u.Files[o.name] = f
	case !f.ours(cur) && !f.restored(cur):
		// Rewritten by someone else since (the primary CNI), who may have
		// kept our entry: theirs is the original now, without it.
		f = &fileUndo{Original: cur}
		if meta != nil {
			f.Meta = *meta
		}
		if stripped, had := unchainList(cur); had {
			f.Original = stripped
		}
		u.Files[o.name] = f
	}
	f.Wrote = ""
	if o.data != nil {
		f.Wrote = digest(o.data)
	}
	return nil
}

// Check says whether the binary and the chain are in place, for a
// readiness probe. It changes nothing.
func (i *Installer) Check() error {
	// First: after an uninstall, why nothing is in place.
	if err := i.store().marked(); err != nil {
		return err
	}
	want, err := i.exeBytes()
	if err != nil {
		return err
	}
	cur, _, err := atomicfile.ReadRegular(i.BinDir, BinaryName)
	switch {
	case err != nil:
		return err
	case cur == nil:
		return fmt.Errorf("binary %s: missing", filepath.Join(i.BinDir, BinaryName))
	case !bytes.Equal(cur, want):
		return fmt.Errorf("binary %s: differs from this installer's", filepath.Join(i.BinDir, BinaryName))
	}
	p, err := findPrimary(i.ConfDir, i.Primary)
	if err != nil {
		return err
	}
	u, err := i.store().load()
	if err != nil {
		return err
	}
	ops, err := i.plan(p, u)
	if err != nil {
		return err
	}
	if len(ops) > 0 {
		return fmt.Errorf("primary %s: external-ip is not chained as configured", filepath.Join(i.ConfDir, p.name))
	}
	return nil
}

// joinLine is errors.Join on one line: a message of ours is one line, in
// the probe's output, the command's and the log's, however many things
// failed at once.
func joinLine(errs ...error) error {
	return errkind.OneLine(errors.Join(errs...))
}
