package tally

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Key is one counter: a CNI verb and the result code (0 = success).
type Key struct {
	Verb string
	Code uint
}

// verbs are the verbs a line may name; anything else is not ours and is
// skipped, so that a stray line cannot invent a series.
var verbs = map[string]bool{"ADD": true, "DEL": true, "CHECK": true, "GC": true, "STATUS": true}

// maxSize is the size past which a Folder starts a new file: the file is
// read incrementally, so its size costs only disk, but it must not grow for
// the life of the node.
const maxSize = 1 << 20

// Folder folds the lines appended to dataDir/cni-requests into totals. It
// is not safe for concurrent use.
type Folder struct {
	// MakeDir creates a missing dataDir (0700, as the plugin would), so
	// that the very first call on a fresh node is counted too. Set it only
	// for the dataDir the node's plugin entry names.
	MakeDir bool

	path    string
	cur     *os.File // the file the plugin appends to, read up to its end
	old     *os.File // the file replaced at the last fold, drained at the next
	partial []byte   // a line of cur not yet whole
	counts  map[Key]uint64
	max     int64
}

// NewFolder folds dataDir/cni-requests.
func NewFolder(dataDir string) *Folder {
	return &Folder{path: filepath.Join(dataDir, FileName), counts: map[Key]uint64{}, max: maxSize}
}

// Fold reads what was appended since the last fold, creating the file when
// it is missing (from then on the plugin counts), and returns the totals
// since this Folder began. A missing dataDir is no error (unless MakeDir):
// no call has written state there yet.
func (f *Folder) Fold() (map[Key]uint64, error) {
	if f.old != nil {
		// Replaced a fold ago: an invocation that opened it before then has
		// long written its line.
		f.drain(f.old, nil)
		f.old.Close()
		f.old = nil
	}
	if err := f.open(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f.counts, nil
		}
		return f.counts, err
	}
	f.drain(f.cur, &f.partial)
	return f.counts, f.rotate()
}

// Close closes the files.
func (f *Folder) Close() {
	for _, c := range []*os.File{f.cur, f.old} {
		if c != nil {
			c.Close()
		}
	}
	f.cur, f.old = nil, nil
}

// open opens the file unless the one open is still the one at the path; a
// file removed or replaced by someone else is drained and let go.
func (f *Folder) open() error {
	var at unix.Stat_t
	err := unix.Lstat(f.path, &at)
	if f.cur != nil && err == nil && same(f.cur, &at) {
		return nil
	}
	if f.cur != nil {
		f.drain(f.cur, nil)
		f.cur.Close()
		f.cur, f.partial = nil, nil
	}
	if errors.Is(err, unix.ENOENT) {
		if f.MakeDir {
			if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
				return err
			}
		}
		if err := f.create(f.path); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	c, err := openRegular(f.path)
	if err != nil {
		return err
	}
	f.cur = c
	return nil
}

// create makes an empty file at path, 0600, never through a symlink.
func (f *Folder) create(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "creating", Path: path, Err: err}
	}
	return unix.Close(fd)
}

// openRegular opens path to read, refusing a symlink or anything that is
// not a regular file.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "opening", Path: path, Err: err}
	}
	c := os.NewFile(uintptr(fd), path)
	if st, err := c.Stat(); err != nil || !st.Mode().IsRegular() {
		c.Close()
		return nil, fmt.Errorf("opening %s: not a regular file", path)
	}
	return c, nil
}

func same(c *os.File, at *unix.Stat_t) bool {
	var st unix.Stat_t
	return unix.Fstat(int(c.Fd()), &st) == nil && st.Dev == at.Dev && st.Ino == at.Ino
}

// rotate replaces a file grown past max by an empty one, atomically, so
// that the plugin always finds a file; the old one is drained next fold.
func (f *Folder) rotate() error {
	st, err := f.cur.Stat()
	if err != nil || st.Size() < f.max {
		return err
	}
	tmp := f.path + ".new"
	os.Remove(tmp) // a leftover of a rotation cut short
	if err := f.create(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("replacing %s: %w", f.path, err)
	}
	f.old, f.cur, f.partial = f.cur, nil, nil
	return f.open()
}

// drain counts the whole lines from c's offset to its end. partial, when
// not nil, keeps a trailing line not yet whole for the next drain; a file
// read for the last time has its tail dropped.
func (f *Folder) drain(c *os.File, partial *[]byte) {
	data, _ := io.ReadAll(c)
	if partial != nil {
		data = append(*partial, data...)
	}
	end := bytes.LastIndexByte(data, '\n') + 1
	for _, l := range bytes.Split(data[:end], []byte{'\n'}) {
		if k, ok := parse(l); ok {
			f.counts[k]++
		}
	}
	if partial != nil {
		*partial = append([]byte(nil), data[end:]...)
	}
}

// parse reads "VERB CODE".
func parse(l []byte) (Key, bool) {
	verb, code, ok := bytes.Cut(l, []byte{' '})
	if !ok || !verbs[string(verb)] {
		return Key{}, false
	}
	n, err := strconv.ParseUint(string(code), 10, 16)
	if err != nil {
		return Key{}, false
	}
	return Key{Verb: string(verb), Code: uint(n)}, true
}
