package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// undoDir is our hidden directory in the conf dir (see doc.go for why there).
const (
	undoDir  = ".external-ip"
	undoName = "undo.json"
)

// undo is everything Install changed, recorded before each change.
type undo struct {
	// Binary is set once Install is about to write the binary.
	Binary *binaryUndo `json:"binary,omitempty"`
	// Files are the conf dir's files Install wrote or removed, by name.
	Files map[string]*fileUndo `json:"files"`
	// DataDir is the chained entry's: where uninstall looks for the holder
	// devices to remove.
	DataDir string `json:"dataDir,omitempty"`
}

type binaryUndo struct {
	// Preexisting: a binary was there before our first install (put there
	// by hand or by a package). Uninstall puts it back from its copy,
	// CONF/.external-ip/binary.orig, with Meta; Original is its SHA-256,
	// "" in an undo file from before the copy was kept (then Uninstall
	// leaves the binary in place).
	Preexisting bool             `json:"preexisting"`
	Original    string           `json:"original,omitempty"`
	Meta        *atomicfile.Meta `json:"meta,omitempty"`
	// Wrote are the SHA-256 of the binaries of ours that may be in place:
	// the one being written and, until the rename, the one it replaces.
	// A binary that matches neither was put there by someone else since.
	Wrote []string `json:"wrote,omitempty"`
}

// ours says whether current is a binary we wrote. An undo file from before
// Wrote was kept knows no digest: its binary counts as ours.
func (b *binaryUndo) ours(current []byte) bool {
	return len(b.Wrote) == 0 || slices.Contains(b.Wrote, digest(current))
}

// writing notes want as ours before it replaces current.
func (b *binaryUndo) writing(current, want []byte) {
	wrote := []string{digest(want)}
	if current != nil && b.ours(current) {
		wrote = append(wrote, digest(current))
	}
	b.Wrote = wrote
}

// fileUndo is one conf dir file: what to put back and what we left there.
type fileUndo struct {
	// Original is the file before we changed it; nil when it did not exist.
	Original []byte          `json:"original"`
	Meta     atomicfile.Meta `json:"meta"`
	// Wrote is the SHA-256 of what we wrote, "" when we removed the file.
	// A file that no longer matches it was changed by someone else since.
	Wrote string `json:"wrote"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ours says whether dir/name is still as we left it.
func (f *fileUndo) ours(current []byte) bool {
	if f.Wrote == "" {
		return current == nil
	}
	return current != nil && digest(current) == f.Wrote
}

// restored says whether dir/name is already the original.
func (f *fileUndo) restored(current []byte) bool {
	if f.Original == nil {
		return current == nil
	}
	return current != nil && bytes.Equal(current, f.Original)
}

// originalName is the copy of the binary that was there before our
// first install, in our directory of the conf dir: it lives as long as
// the undo file, and the bin dir holds only what runtimes may run.
const originalName = "binary.orig"

// keepOriginal copies the binary found before the first install, before
// it is replaced, and records it in b.
func (s undoStore) keepOriginal(b *binaryUndo, data []byte, meta atomicfile.Meta) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	if err := atomicfile.Write(s.dir, originalName, data, atomicfile.Meta{Mode: 0o600, UID: os.Getuid(), GID: os.Getgid()}, s.fault); err != nil {
		return err
	}
	b.Original, b.Meta = digest(data), &meta
	return nil
}

// original reads the copy keepOriginal made; nil when it is missing or
// not the binary b recorded.
func (s undoStore) original(b *binaryUndo) ([]byte, error) {
	data, _, err := atomicfile.ReadRegular(s.dir, originalName)
	if err != nil || data == nil || digest(data) != b.Original {
		return nil, err
	}
	return data, nil
}

// undoStore reads and writes CONF/.external-ip/undo.json.
type undoStore struct {
	dir   string // CONF/.external-ip
	fault atomicfile.Fault
}

func (s undoStore) path() string { return filepath.Join(s.dir, undoName) }

// load reads the undo file; none yet is an empty undo.
func (s undoStore) load() (*undo, error) {
	u := &undo{Files: map[string]*fileUndo{}}
	if err := s.checkDir(); err != nil {
		return nil, err
	}
	data, _, err := atomicfile.ReadRegular(s.dir, undoName)
	if err != nil || data == nil {
		return u, err
	}
	if err := json.Unmarshal(data, u); err != nil {
		return nil, fmt.Errorf("undo file %s: is corrupt: %w", s.path(), err)
	}
	if u.Files == nil {
		u.Files = map[string]*fileUndo{}
	}
	return u, nil
}

// checkDir refuses an undo directory that is a symlink or not a directory.
func (s undoStore) checkDir() error {
	fi, err := os.Lstat(s.dir)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return fmt.Errorf("undo directory %s: %w", s.dir, err)
	case !fi.IsDir():
		return fmt.Errorf("undo directory %s: is %s, not a directory; refusing to use it", s.dir, atomicfile.KindOf(fi.Mode()))
	}
	return nil
}

func (s undoStore) save(u *undo) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(u, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", s.path(), err)
	}
	if err := atomicfile.SweepTemps(s.dir); err != nil {
		return err
	}
	return atomicfile.Write(s.dir, undoName, data, atomicfile.Meta{Mode: 0o600, UID: os.Getuid(), GID: os.Getgid()}, s.fault)
}

// loadIfAny reads the undo file; nil when there is none.
func (s undoStore) loadIfAny() (*undo, error) {
	if _, err := os.Lstat(s.path()); os.IsNotExist(err) {
		return nil, nil
	}
	return s.load()
}

// remove drops the undo file once all is undone.
func (s undoStore) remove() error {
	if _, err := os.Lstat(s.dir); os.IsNotExist(err) {
		return nil
	}
	if err := atomicfile.SweepTemps(s.dir); err != nil {
		return err
	}
	return atomicfile.Remove(s.dir, undoName, s.fault)
}

// removeDir drops our directory, once empty.
func (s undoStore) removeDir() error {
	if err := os.Remove(s.dir); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing %s: %w", s.dir, err)
	}
	return atomicfile.SyncDir(filepath.Dir(s.dir))
}
