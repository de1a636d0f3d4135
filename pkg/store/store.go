package store

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Store is the state directory of one holder device. Its files are only
// ever reached through the handles of its directories, opened under the
// lock without following a symlink, so nothing planted inside dataDir can
// send a read, a write or a removal outside it. A Store is used by one
// goroutine; Lock opens it, Unlock closes it, and it can be locked again.
type Store struct {
	dataDir, device string
	dir             string // dataDir/device, to name things in messages
	resolved        string // dataDir with its symlinks followed
	fd              [nwhere]int
	// beforeMkdir is called before the missing part of dataDir is made;
	// tests make a directory there first, as another user could.
	beforeMkdir stepFunc
}

// stepFunc is a test's hook at a named point; nil does nothing.
type stepFunc func(point string)

func (f stepFunc) at(point string) {
	if f != nil {
		f(point)
	}
}

// where is a directory of the state: the handles the store holds.
type where int

const (
	data where = iota // dataDir itself, which is locked
	top               // dataDir/device
	inTmp
	inAtt
	inIP
	lock // the legacy lock file
	nwhere
)

var subdirs = [nwhere]string{inTmp: "tmp", inAtt: "att", inIP: "ip"}

const (
	dirMode  = 0o700
	fileMode = 0o600
	lockName = "lock"
)

// File is one of the files of the device's state directory itself, each
// holding one JSON value.
type File string

const (
	// JournalFile holds the change under way (a Journal): written before
	// any other file or the kernel is touched.
	JournalFile File = "journal"
	// CreatingFile names the temporary name the holder is being made under.
	CreatingFile File = "creating-device"
	// ConntrackFile is the queue of conntrack clean-ups.
	ConntrackFile File = "conntrack"
)

// New returns the store of device's state under dataDir. It opens nothing
// until Lock.
func New(dataDir, device string) *Store {
	s := &Store{dataDir: dataDir, device: device, dir: filepath.Join(dataDir, device)}
	for i := range s.fd {
		s.fd[i] = -1
	}
	return s
}

// path names a state file in messages; it is never opened by that name.
func (s *Store) path(w where, name string) string {
	if w == top || w == lock {
		return filepath.Join(s.dir, name)
	}
	return filepath.Join(s.dir, subdirs[w], name)
}

func recordName(key string) string { return key + ".json" }
func ipName(ip netip.Addr) string  { return ip.String() + ".json" }

// Dir is the device's state directory, dataDir/device, to name it in
// messages.
func (s *Store) Dir() string { return s.dir }

// Path names f in messages; it is never opened by that name.
func (s *Store) Path(f File) string { return s.path(top, string(f)) }

// IPPath names ip's index entry in messages.
func (s *Store) IPPath(ip netip.Addr) string { return s.path(inIP, ipName(ip)) }

// Exists says whether the device has a state directory, without a lock.
func (s *Store) Exists() bool { _, err := os.Lstat(s.dir); return err == nil }

// Read decodes f into v, false when f does not exist. The methods that
// read or write need the lock.
func (s *Store) Read(f File, v any) (bool, error) { return s.readJSON(top, string(f), v) }

// Write replaces f with v atomically.
func (s *Store) Write(f File, v any) error { return s.writeJSON(top, string(f), v) }

// Remove removes f; one already gone is no error.
func (s *Store) Remove(f File) error { return s.remove(top, string(f)) }

// Has says whether f exists; a symlink there is an error.
func (s *Store) Has(f File) (bool, error) { return s.has(top, string(f)) }

// Reader is what a reader of the state asks, under the lock: the IPs
// held, each IP's holders, and each holder's record.
type Reader interface {
	Indexed() ([]netip.Addr, error)
	ReadIP(ip netip.Addr) (IPEntry, error)
	ReadRecord(key string) (*Record, error)
}

var _ Reader = (*Store)(nil)

// Empty is the state of a node with no state directory: nothing held.
type Empty struct{}

func (Empty) Indexed() ([]netip.Addr, error)     { return nil, nil }
func (Empty) ReadIP(netip.Addr) (IPEntry, error) { return IPEntry{}, nil }
func (Empty) ReadRecord(string) (*Record, error) { return nil, nil }

// ReadRecord is the record of the attachment with key, nil when it has none.
func (s *Store) ReadRecord(key string) (*Record, error) {
	r := &Record{}
	ok, err := s.readJSON(inAtt, recordName(key), r)
	if !ok {
		r = nil
	}
	return r, err
}

// WriteRecord stores the record of the attachment with key.
func (s *Store) WriteRecord(key string, r *Record) error {
	return s.writeJSON(inAtt, recordName(key), r)
}

// RemoveRecord removes the record of the attachment with key.
func (s *Store) RemoveRecord(key string) error { return s.remove(inAtt, recordName(key)) }

// ReadIP is ip's index entry, empty when it has none. Its holders come
// sorted and unique, even after a hand edit, so that they can be searched.
func (s *Store) ReadIP(ip netip.Addr) (IPEntry, error) {
	var e IPEntry
	_, err := s.readJSON(inIP, ipName(ip), &e)
	slices.Sort(e.Holders)
	e.Holders = slices.Compact(e.Holders)
	slices.Sort(e.Standby)
	e.Standby = slices.Compact(e.Standby)
	return e, err
}

// WriteIP stores ip's entry, or removes it once nobody holds the IP,
// actively or in standby.
func (s *Store) WriteIP(ip netip.Addr, e IPEntry) error {
	if len(e.Holders)+len(e.Standby) == 0 {
		return s.remove(inIP, ipName(ip))
	}
	return s.writeJSON(inIP, ipName(ip), e)
}

// readJSON decodes a state file into v, a new value; a missing file is
// (false, nil). A file that exists but does not decode is an error naming
// it: state is never reset silently.
func (s *Store) readJSON(w where, name string, v any) (bool, error) {
	b, err := s.readFile(w, name)
	if b == nil || err != nil {
		return false, err
	}
	if err := decodeState(b, v); err != nil {
		return false, errorf(ErrState, "state file %s is corrupt: %v; see the README's recovery section", s.path(w, name), err)
	}
	return true, nil
}

// readFile reads a regular file of the state, nil when it does not exist.
// O_NONBLOCK keeps a planted FIFO from blocking the open.
func (s *Store) readFile(w where, name string) ([]byte, error) {
	path := s.path(w, name)
	fd, err := unix.Openat(s.fd[w], name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case errors.Is(err, unix.ELOOP):
		return nil, notFollowed(s.fd[w], name, path, "file")
	case err != nil:
		return nil, errorf(ErrState, "reading state file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errorf(ErrState, "state file %s is not a regular file; remove it", path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, errorf(ErrState, "reading state file %s: %w", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// writeJSON replaces a state file atomically: a crash leaves the old or the
// new content, never a torn file. The temp file's name matches tmpPattern,
// so that a crash's leftover is swept. A file that already holds these
// bytes is left as it is: undoing an ADD then needs no room for what the
// ADD never got to change, so it works on a full filesystem.
func (s *Store) writeJSON(w where, name string, v any) error {
	path := s.path(w, name)
	b, err := encodeState(v)
	if err != nil {
		return errorf(ErrState, "encoding %s: %w", path, err)
	}
	// readFile refuses a symlink or a non-regular file: never replaced.
	if cur, err := s.readFile(w, name); err != nil || bytes.Equal(cur, b) {
		return err
	}
	tmp, err := s.stage(name, b)
	if err == nil {
		err = unix.Renameat(s.fd[inTmp], tmp, s.fd[w], name)
		if err != nil {
			unix.Unlinkat(s.fd[inTmp], tmp, 0)
		}
	}
	if err != nil {
		return errorf(ErrState, "writing %s: %w", path, err)
	}
	return nil
}

// stage writes b to a new file in tmp/ and syncs it.
func (s *Store) stage(name string, b []byte) (string, error) {
	tmp := name + "." + strconv.FormatUint(uint64(rand.Uint32()), 10)
	fd, err := unix.Openat(s.fd[inTmp], tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(s.fd[inTmp], tmp, 0)
	}
	return tmp, err
}

// has says whether a state file exists; a symlink there is an error.
func (s *Store) has(w where, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(s.fd[w], name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, errorf(ErrState, "checking %s: %w", s.path(w, name), err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false, notFollowed(s.fd[w], name, s.path(w, name), "file")
	}
	return true, nil
}

// remove unlinks a state file; unlinkat never follows a symlink.
func (s *Store) remove(w where, name string) error {
	if err := unix.Unlinkat(s.fd[w], name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return errorf(ErrState, "removing %s: %w", s.path(w, name), err)
	}
	return nil
}

// ReadJournal is the change left under way, nil when there is none. A
// journal this binary cannot carry out is an error naming it.
func (s *Store) ReadJournal() (*Journal, error) {
	j := &Journal{}
	ok, err := s.readJSON(top, string(JournalFile), j)
	if !ok || err != nil {
		return nil, err
	}
	return j, j.check(s.Path(JournalFile))
}

// Records reads every attachment record; only GC and status need them all.
// Beside a record it cannot read it returns the others with the errors
// joined, so that GC can release the stale ones it can read.
func (s *Store) Records() (map[string]*Record, error) {
	names, err := s.list(inAtt)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Record, len(names))
	var errs []error
	for _, n := range names {
		key, ok := strings.CutSuffix(n, ".json")
		if !ok {
			continue
		}
		r, err := s.ReadRecord(key)
		errs = append(errs, err)
		if r != nil {
			out[key] = r
		}
	}
	return out, errors.Join(errs...)
}

// Indexed lists the IPs that have an index entry.
func (s *Store) Indexed() ([]netip.Addr, error) {
	names, err := s.list(inIP)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range names {
		if ip, err := netip.ParseAddr(strings.TrimSuffix(n, ".json")); err == nil {
			out = append(out, ip)
		}
	}
	return out, nil
}

// probe is what Writable stages, and removes, to prove the state writable.
const probe = "status"

// staged are the names writeJSON and Writable stage under, besides the
// records' and the index entries': every File, and Writable's probe.
var staged = []File{JournalFile, CreatingFile, ConntrackFile, probe}

// tmpPattern is the name of a file that writeJSON stages (and that older
// binaries' os.CreateTemp staged): a state file's name and a number.
// Compiled on first use, by GC: compiling it at start cost every ADD a
// measurable share (docs/performance.md, "Figures behind design choices").
var tmpPattern = sync.OnceValue(func() *regexp.Regexp {
	names := make([]string, len(staged))
	for i, f := range staged {
		names[i] = regexp.QuoteMeta(string(f))
	}
	return regexp.MustCompile(`^(` + strings.Join(names, "|") + `|[0-9a-f]{32}\.json|[0-9a-fA-F.:]+\.json)\.[0-9]+$`)
})

// SweepTmp removes the staged writes that a crash left behind, and nothing
// else: a file of another name in tmp/ is not ours to remove.
func (s *Store) SweepTmp() error {
	names, err := s.list(inTmp)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !tmpPattern().MatchString(n) {
			continue
		}
		if err := s.remove(inTmp, n); err != nil {
			return err
		}
	}
	return nil
}

// list names the entries of one of the state's directories.
func (s *Store) list(w where) ([]string, error) {
	var names []string
	err := s.scan(w, func(batch []string) bool { names = append(names, batch...); return true })
	return names, err
}

// AnyIndexed tells whether any IP has an index entry, reading no more of
// ip/ than it needs to.
func (s *Store) AnyIndexed() (bool, error) {
	found := false
	err := s.scan(inIP, func(batch []string) bool {
		found = slices.ContainsFunc(batch, func(n string) bool {
			_, err := netip.ParseAddr(strings.TrimSuffix(n, ".json"))
			return err == nil
		})
		return !found
	})
	return found, err
}

// scan passes the entries of a state directory to f in batches until f
// returns false.
func (s *Store) scan(w where, f func([]string) bool) error {
	fd, err := unix.Openat(s.fd[w], ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errorf(ErrState, "reading state directory %s: %w", s.path(w, ""), err)
	}
	dir := os.NewFile(uintptr(fd), s.path(w, ""))
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(64)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errorf(ErrState, "reading state directory %s: %w", s.path(w, ""), err)
		}
		if !f(names) {
			return nil
		}
	}
}

// Writable proves that an ADD could write the state, and leaves nothing
// behind (STATUS changes nothing): where the device's tmp/ exists it stages
// and removes one file there, which also finds a full filesystem; where it
// does not, the deepest directory that exists on the way to it must be
// writable, as an ADD would create the rest under it. A journal that
// cannot be read is no state an ADD could write either: every ADD and DEL
// fails on it (ErrState, naming it) until it is moved aside.
func (s *Store) Writable() error {
	defer s.close()
	existing, err := s.openExisting()
	if err != nil {
		return err
	}
	if s.fd[top] >= 0 {
		if _, err := s.ReadJournal(); err != nil {
			return err
		}
	}
	if s.fd[inTmp] < 0 {
		if err := unix.Access(existing, unix.W_OK); err != nil {
			return errorf(ErrState, "state directory %s: is not writable: %s: %w", s.dir, existing, err)
		}
		return nil
	}
	tmp, err := s.stage(probe, []byte("{}"))
	if err != nil {
		return errorf(ErrState, "state directory %s: is not writable: %w", s.dir, err)
	}
	return s.remove(inTmp, tmp)
}

// openExisting opens, making nothing, as much of dataDir/device/tmp as
// exists, each level checked as a lock would check it, and names the
// deepest directory that exists.
func (s *Store) openExisting() (string, error) {
	found, err := s.openData(false)
	if err != nil {
		return "", err
	}
	if !found {
		_, existing, err := resolve(s.dataDir)
		return existing, err
	}
	if s.fd[top], err = s.openDir(s.fd[data], s.device, s.dir, false); err != nil || s.fd[top] < 0 {
		return s.resolved, err
	}
	s.fd[inTmp], err = s.openDir(s.fd[top], subdirs[inTmp], s.path(inTmp, ""), false)
	return filepath.Join(s.resolved, s.device), err
}
