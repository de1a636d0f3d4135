package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
	"github.com/external-ip/external-ip/pkg/install/internal/cniconf"
)

// ErrNoPrimary: the conf dir holds no valid network config to chain into
// (yet): the primary CNI has not written its file.
var ErrNoPrimary = errors.New("no primary network config")

// confExts are the extensions the runtimes read, as containerd (go-cni) and
// CRI-O (ocicni) list them.
var confExts = []string{".conf", ".conflist", ".json"}

// settleBroken is how long after its last change a file that does not
// load is taken for one its writer is still writing in place (a truncate,
// then a write: a shell's >, Go's os.WriteFile). The next file is
// what the runtime loads for that moment only: chained, and converted if
// it is a .conf, it would stay changed until uninstall. A file still
// broken after settleBroken is broken for good: passed over, as the
// runtime passes over it.
const settleBroken = 5 * time.Second

// errHalfWritten: the first file that does not load changed within
// settleBroken; install waits for it rather than chain the next one.
var errHalfWritten = errors.New("may be half-written")

// primary is the network config the runtime picks.
type primary struct {
	name string // base name in the conf dir
	data []byte
	meta atomicfile.Meta
	list bool // a .conflist; otherwise one plugin (.conf, .json)
	// skipped are the files before it that do not load, with why.
	skipped []string
}

// findPrimary picks the config the runtime uses, by libcni's own loading
// (package cniconf), as containerd and CRI-O call it: the lexically first
// file that loads, or the one named. Files that do not load are skipped, as
// runtimes skip them, unless they may be half-written (settleBroken). The
// runtime's pick is chained into or refused, never passed over for the
// next file: the runtime would still load it, without us. A single-plugin
// file we already turned into NAME.conflist is found under that name when
// named asks for NAME.conf.
func findPrimary(dir, named string) (*primary, error) {
	paths, err := cniconf.ConfFiles(dir, confExts)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.Sort(paths)
	var skipped []string
	for _, path := range paths {
		name := filepath.Base(path)
		if named != "" && name != named && name != listName(named) {
			continue
		}
		loaded, err := runtimeLoads(path)
		if age, recent := changedWithin(path, settleBroken); err != nil && recent {
			return nil, fmt.Errorf("%w in %s: %s %w (it does not load: %v; changed %s ago): waiting for it, %s at most, rather than chaining the next file",
				ErrNoPrimary, dir, name, errHalfWritten, err, age.Round(time.Millisecond), settleBroken)
		} else if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		p, err := chainable(dir, name, loaded)
		if p != nil {
			p.skipped = skipped
		}
		return p, err
	}
	return nil, noPrimary(dir, named, skipped)
}

// changedWithin says whether the regular file at path (followed, as the
// runtime reads it) last changed less than d ago, and how long ago.
func changedWithin(path string, d time.Duration) (time.Duration, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	age := time.Since(fi.ModTime())
	return age, age > -d && age < d
}

// runtimeLoads loads path as go-cni and ocicni do: a .conflist as a list
// (with the plugins of its CNI 1.1 subdirectory), any other file as one
// plugin with a type, up-converted to a list.
func runtimeLoads(path string) (*cniconf.NetworkConfigList, error) {
	if filepath.Ext(path) == ".conflist" {
		return cniconf.ConfListFromFile(path)
	}
	c, err := cniconf.ConfFromFile(path)
	if err != nil {
		return nil, err
	}
	return cniconf.ConfListFromConf(c)
}

func noPrimary(dir, named string, skipped []string) error {
	what := "in " + dir
	if named != "" {
		what = fmt.Sprintf("named %q in %s", named, dir)
	}
	if len(skipped) == 0 {
		return fmt.Errorf("%w %s", ErrNoPrimary, what)
	}
	return fmt.Errorf("%w %s (skipped: %s)", ErrNoPrimary, what, strings.Join(skipped, "; "))
}

// chainable reads the runtime's pick, refusing what we cannot chain into
// so that the runtime would run us: a symlink (we never write through
// one) and a list whose plugins live in its CNI 1.1 <name>/ subdirectory
// (libcni appends those after the inline ones, so an entry of ours in the
// list would not run last).
func chainable(dir, name string, loaded *cniconf.NetworkConfigList) (*primary, error) {
	if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(filepath.Join(dir, name))
		return nil, fmt.Errorf("%w: primary %s: is a symlink (to %s), which the runtime follows and external-ip never writes through; make it a regular file or choose another primary",
			ErrInvalid, filepath.Join(dir, name), target)
	}
	data, meta, err := atomicfile.ReadRegular(dir, name)
	if err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	if data == nil {
		return nil, fmt.Errorf("primary %s: vanished", filepath.Join(dir, name))
	}
	p := &primary{name: name, data: data, meta: *meta, list: filepath.Ext(name) == ".conflist"}
	if p.list {
		inline, err := cniconf.ConfListFromBytes(data)
		if err != nil || len(inline.Plugins) != len(loaded.Plugins) {
			return nil, fmt.Errorf("%w: primary %s: keeps plugins in its subdirectory %s/ (CNI 1.1), after which an entry of ours would not run last; external-ip chains only into a list's \"plugins\"",
				ErrInvalid, filepath.Join(dir, name), filepath.Join(dir, loaded.Name))
		}
	}
	return p, nil
}

// listName is the .conflist a single-plugin file becomes.
func listName(name string) string {
	if ext := filepath.Ext(name); ext == ".conf" || ext == ".json" {
		return strings.TrimSuffix(name, ext) + ".conflist"
	}
	return name
}
