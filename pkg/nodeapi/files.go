package nodeapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
	"github.com/external-ip/external-ip/pkg/store"
)

// The files under dataDir (doc.go).
const (
	claimsDir   = "claims"
	poolsFile   = "claims/pools"
	intentDir   = "claims/att"
	deferredDir = "claims/released"
	dirMode     = 0o700
	fileMode    = 0o600
	// tmpPrefix marks a write being staged; readers pass over it.
	tmpPrefix = ".tmp-"
)

// Pools is what the node process publishes while the cluster has pools.
type Pools struct {
	Names []string `json:"pools"`
	// Held are the pools that admit this node and whose spec.hold says how
	// a node holds their IPs: STATUS checks that the LAN can reach IPs held
	// so, as it does for the config's own hold. Absent from a file of an
	// earlier node process.
	Held []HeldPool `json:"held,omitempty"`
}

// HeldPool is a pool that says how its IPs are held, with the families
// it gives.
type HeldPool struct {
	Name string `json:"name"`
	Hold string `json:"hold"`
	IPv4 bool   `json:"ipv4,omitempty"`
	IPv6 bool   `json:"ipv6,omitempty"`
}

// Add publishes a pool: its name, and its hold with its families when it
// says one.
func (p *Pools) Add(name, hold string, fams []iprange.Family) {
	p.Names = append(p.Names, name)
	if hold != "" {
		p.Held = append(p.Held, HeldPool{Name: name, Hold: hold,
			IPv4: slices.Contains(fams, iprange.IPv4), IPv6: slices.Contains(fams, iprange.IPv6)})
	}
}

// Marker is an attachment that asked for a claim: who it was, for a
// release that must happen without the DEL's arguments.
type Marker struct {
	Attachment store.Attachment `json:"attachment"`
	Pod        Pod              `json:"pod"`
}

// Published reads what the node process published: ok is false when the
// cluster has no pool (or no node process ever said it has), which is the
// path of every explicit IP before pools: one failed open, nothing else.
func Published(dataDir string) (p Pools, ok bool, err error) {
	root, err := os.OpenRoot(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return Pools{}, false, nil
	} else if err != nil {
		return Pools{}, false, errorf(ErrFiles, "reading %s: %w", path.Join(dataDir, poolsFile), err)
	}
	defer root.Close()
	data, err := root.ReadFile(poolsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Pools{}, false, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &p)
	}
	if err != nil {
		return Pools{}, false, errorf(ErrFiles, "reading %s: %w", path.Join(dataDir, poolsFile), err)
	}
	return p, true, nil
}

// Publish says that the cluster has these pools; none removes the file.
func Publish(dataDir string, p Pools) error {
	return withRoot(dataDir, func(root *os.Root) error {
		if len(p.Names) == 0 {
			return removeIfThere(root, poolsFile)
		}
		return writeAtomic(root, poolsFile, p)
	})
}

// MarkIntent records, before the plugin asks, that the attachment may
// come to hold claims. Its syncs are not what keeps claims right: only a
// kernel crash or a power loss loses an unsynced intent, and that ends
// the node's attachments too, whose claims the node process then releases
// (a holder with no intent). They stay because on the tmpfs dataDir lives
// on they cost about 25 µs of the 0.1 ms write (measured, warm).
func MarkIntent(dataDir string, m Marker) error {
	return withRoot(dataDir, func(root *os.Root) error {
		return writeAtomic(root, markerPath(intentDir, m.Attachment), m)
	})
}

// HasIntent says whether the attachment asked for a claim and has not
// been released since.
func HasIntent(dataDir string, a store.Attachment) (bool, error) {
	return exists(dataDir, markerPath(intentDir, a))
}

// IsDeferred says whether the attachment's release waits in the released
// directory.
func IsDeferred(dataDir string, a store.Attachment) (bool, error) {
	return exists(dataDir, markerPath(deferredDir, a))
}

func exists(dataDir, name string) (bool, error) {
	root, err := os.OpenRoot(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, errorf(ErrFiles, "reading %s: %w", dataDir, err)
	}
	defer root.Close()
	_, err = root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, errorf(ErrFiles, "reading %s: %w", path.Join(dataDir, name), err)
	}
	return true, nil
}

// Forget removes the attachment's marker once its release was carried out.
func Forget(dataDir string, a store.Attachment) error {
	return withRoot(dataDir, func(root *os.Root) error { return removeIfThere(root, markerPath(intentDir, a)) })
}

// Defer hands the attachment's release to the node process for later: its
// marker moves, in one rename, to the released directory.
func Defer(dataDir string, a store.Attachment) error {
	return withRoot(dataDir, func(root *os.Root) error {
		if err := root.MkdirAll(deferredDir, dirMode); err != nil {
			return err
		}
		err := root.Rename(markerPath(intentDir, a), markerPath(deferredDir, a))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // released already
		}
		if err == nil {
			err = syncDir(root, deferredDir)
		}
		return err
	})
}

// Deferred are the releases the node process has yet to carry out.
func Deferred(dataDir string) ([]Marker, error) { return markers(dataDir, deferredDir) }

// Intents are the attachments that may hold claims on this node.
func Intents(dataDir string) ([]Marker, error) { return markers(dataDir, intentDir) }

// Released removes a deferred release once carried out.
func Released(dataDir string, a store.Attachment) error {
	return withRoot(dataDir, func(root *os.Root) error { return removeIfThere(root, markerPath(deferredDir, a)) })
}

func markerPath(dir string, a store.Attachment) string { return dir + "/" + a.Key() + ".json" }

// markers reads every marker of dir; one that does not decode is skipped,
// as a staged write is: it names no attachment that can be trusted. A read
// makes nothing: a GC or a refused call with no state leaves dataDir as it
// found it, and a missing dataDir or dir has no markers.
func markers(dataDir, dir string) ([]Marker, error) {
	root, err := os.OpenRoot(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, errorf(ErrFiles, "reading %s: %w", dataDir, err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, errorf(ErrFiles, "reading %s: %w", path.Join(dataDir, dir), err)
	}
	var out []Marker
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var m Marker
		data, err := root.ReadFile(dir + "/" + e.Name())
		if err == nil && json.Unmarshal(data, &m) == nil && markerPath(dir, m.Attachment) == dir+"/"+e.Name() {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Marker) int { return strings.Compare(a.Attachment.String(), b.Attachment.String()) })
	return out, nil
}

// withRoot runs f inside dataDir, which it makes (0700) when missing, with
// the claims directories; errors are of kind ErrFiles.
func withRoot(dataDir string, f func(*os.Root) error) error {
	if err := os.MkdirAll(dataDir, dirMode); err != nil {
		return errorf(ErrFiles, "making %s: %w", dataDir, err)
	}
	root, err := os.OpenRoot(dataDir)
	if err != nil {
		return errorf(ErrFiles, "opening %s: %w", dataDir, err)
	}
	defer root.Close()
	if err := root.MkdirAll(intentDir, dirMode); err != nil {
		return errorf(ErrFiles, "making %s: %w", path.Join(dataDir, intentDir), err)
	}
	if err := f(root); err != nil {
		return errorf(ErrFiles, "%s: %w", path.Join(dataDir, claimsDir), err)
	}
	return nil
}

// writeAtomic replaces name with v as JSON: a staged file beside it,
// fsync, rename, fsync of the directory. A crash leaves the old file or
// the new one, and at worst a staged file that readers pass over.
func writeAtomic(root *os.Root, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Dir(name) + "/" + tmpPrefix + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return err
	}
	return syncDir(root, path.Dir(name))
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func removeIfThere(root *os.Root, name string) error {
	err := root.Remove(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
