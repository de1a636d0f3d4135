package install

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoPrimary: the conf dir holds no valid network config to chain into
// (yet): the primary CNI has not written its file.
var ErrNoPrimary = errors.New("no primary network config")

// confExts are the extensions the runtimes read, as containerd (go-cni) and
// CRI-O (ocicni) list them.
var confExts = []string{".conf", ".conflist", ".json"}

// primary is the network config the runtime picks.
type primary struct {
	name string // base name in the conf dir
	data []byte
	meta fileMeta
	list bool // a .conflist; otherwise one plugin (.conf, .json)
}

// findPrimary picks the config the runtime uses: the lexically first valid
// file, or the one named. Runtimes skip files they cannot load, so do we.
// A single-plugin file we already turned into NAME.conflist is found under
// that name when named asks for NAME.conf.
func findPrimary(dir, named string) (*primary, error) {
	names, err := confFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.Sort(names)
	var skipped []string
	for _, name := range names {
		if named != "" && name != named && name != listName(named) {
			continue
		}
		p, err := loadPrimary(dir, name)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		return p, nil
	}
	return nil, noPrimary(dir, named, skipped)
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

// loadPrimary reads one file and validates it as the runtime would:
// a .conflist must load as a list with plugins, a .conf or .json as one
// plugin with a type.
func loadPrimary(dir, name string) (*primary, error) {
	data, meta, err := readRegular(dir, name)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("%s: vanished", name)
	}
	p := &primary{name: name, data: data, meta: *meta, list: filepath.Ext(name) == ".conflist"}
	check := checkPluginConf
	if p.list {
		check = checkConfList
	}
	if err := check(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
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
