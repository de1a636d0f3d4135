package assigner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// Attachment names one attachment of a container to a network, as CNI does.
type Attachment struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// key hashes the attachment so that no name from a request, whatever its
// characters, can build a path outside the state directory.
func (a Attachment) key() string {
	sum := sha256.Sum256([]byte(a.Network + "\x00" + a.ContainerID + "\x00" + a.IfName))
	return hex.EncodeToString(sum[:16])
}

func (a Attachment) String() string {
	return a.Network + "/" + a.ContainerID + "/" + a.IfName
}

// record is what one attachment holds.
type record struct {
	Attachment
	IPs []netip.Addr `json:"ips"`
	// Steering is the attachment's NAT rules (traffic.go), nil when none.
	Steering *steering `json:"steering,omitempty"`
	// Route is how the attachment asked for its IPs to be held: 0 as
	// addresses, else as routes of that protocol number.
	Route heldAs `json:"route,omitempty"`
}

// ipEntry is the index of one IP: who holds it and where it is announced.
// len(Holders) is the IP's reference count.
type ipEntry struct {
	Holders []string `json:"holders"`
	Uplink  string   `json:"uplink,omitempty"`
	// Route is how the IP is held now: 0 as an address, else as a route of
	// that protocol number. The first holder's record decides it (see
	// applyIP).
	Route heldAs `json:"route,omitempty"`
}

// journal is one change under way. Applying it is idempotent, so it can be
// carried out again after a crash at any point. An ADD's journal is undone
// by whoever finds it: the ADD did not return success, so its runtime
// takes it as failed. A release is finished.
type journal struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	// Record is the attachment's new record; nil releases the attachment.
	Record *record `json:"record"`
	// Touch lists every IP whose holders may change: old and new IPs.
	Touch []netip.Addr `json:"touch"`
	// Uplinks names the uplink chosen for IPs that had no holder yet.
	Uplinks map[netip.Addr]string `json:"uplinks,omitempty"`
	// Old is a re-ADDed attachment's earlier record, which undoing the ADD
	// restores with its IPs' uplinks OldUplinks.
	Old        *record               `json:"old,omitempty"`
	OldUplinks map[netip.Addr]string `json:"oldUplinks,omitempty"`
	// Steps are changes beyond the record, the index and the addresses,
	// each named by its kind; a kind this binary does not know is refused
	// by name rather than skipped.
	Steps []journalStep `json:"steps,omitempty"`
}

// journalStep is one further change of a journal, of a named kind.
type journalStep struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

const (
	opAdd     = "add"     // undone when found after a crash
	opRelease = "release" // finished when found after a crash
)

// check refuses a journal that this binary cannot carry out. A journal of
// a binary from before "op" says what it is by its record.
func (j *journal) check(path string) error {
	j.infer()
	if (j.Op != opAdd && j.Op != opRelease) || (j.Op == opAdd) != (j.Record != nil) {
		return Errorf(ErrState, "state file %s is corrupt: op %q with record %v; see the README's recovery section", path, j.Op, j.Record != nil)
	}
	for _, s := range j.Steps {
		if s.Kind != stepNAT {
			return Errorf(ErrState, "state file %s has a step of kind %q, which this binary does not know", path, s.Kind)
		}
	}
	return nil
}

// infer fills in an op that was left out: a change with a record is an ADD.
func (j *journal) infer() {
	if j.Op != "" {
		return
	}
	j.Op = opRelease
	if j.Record != nil {
		j.Op = opAdd
	}
}

// reverse is the change that undoes an ADD: the earlier record restored,
// or the attachment released when it had none. It is carried out in place,
// never journaled: the ADD's journal stands for it until it is done.
func (j *journal) reverse() *journal {
	if j.Old == nil {
		return &journal{Op: opRelease, Key: j.Key, Touch: j.Touch, Steps: j.natUndone()}
	}
	return &journal{Op: opAdd, Key: j.Key, Record: j.Old, Touch: j.Touch, Uplinks: j.OldUplinks, Steps: j.natUndone()}
}

// store is the state directory of one holder device. Its files are only
// ever reached through the handles of its directories, opened under the
// lock without following a symlink, so nothing planted inside dataDir can
// send a read, a write or a removal outside it.
type store struct {
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
	dirMode      = 0o700
	fileMode     = 0o600
	journalName  = "journal"
	creatingName = "creating-device"
	lockName     = "lock"
)

func newStore(dataDir, device string) *store {
	s := &store{dataDir: dataDir, device: device, dir: filepath.Join(dataDir, device)}
	for i := range s.fd {
		s.fd[i] = -1
	}
	return s
}

// path names a state file in messages; it is never opened by that name.
func (s *store) path(w where, name string) string {
	if w == top || w == lock {
		return filepath.Join(s.dir, name)
	}
	return filepath.Join(s.dir, subdirs[w], name)
}

func recordName(key string) string           { return key + ".json" }
func ipName(ip netip.Addr) string            { return ip.String() + ".json" }
func (s *store) journalPath() string         { return s.path(top, journalName) }
func (s *store) creatingPath() string        { return s.path(top, creatingName) }
func (s *store) ipPath(ip netip.Addr) string { return s.path(inIP, ipName(ip)) }
func (s *store) exists() bool                { _, err := os.Lstat(s.dir); return err == nil }

func (s *store) readRecord(key string) (*record, error) {
	r := &record{}
	ok, err := s.readJSON(inAtt, recordName(key), r)
	if !ok {
		r = nil
	}
	return r, err
}

func (s *store) readIP(ip netip.Addr) (ipEntry, error) {
	var e ipEntry
	_, err := s.readJSON(inIP, ipName(ip), &e)
	// Sorted and unique, so that withHolder can search it even after a
	// hand edit.
	slices.Sort(e.Holders)
	e.Holders = slices.Compact(e.Holders)
	return e, err
}

// writeIP stores an IP's entry, or removes it once nobody holds the IP.
func (s *store) writeIP(ip netip.Addr, e ipEntry) error {
	if len(e.Holders) == 0 {
		return s.remove(inIP, ipName(ip))
	}
	return s.writeJSON(inIP, ipName(ip), e)
}

// readJSON decodes a state file into v; a missing file is (false, nil). A
// file that exists but does not decode is an error naming it: state is
// never reset silently.
func (s *store) readJSON(w where, name string, v any) (bool, error) {
	b, err := s.readFile(w, name)
	if b == nil || err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, Errorf(ErrState, "state file %s is corrupt: %v; see the README's recovery section", s.path(w, name), err)
	}
	return true, nil
}

// readFile reads a regular file of the state, nil when it does not exist.
// O_NONBLOCK keeps a planted FIFO from blocking the open.
func (s *store) readFile(w where, name string) ([]byte, error) {
	path := s.path(w, name)
	fd, err := unix.Openat(s.fd[w], name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case errors.Is(err, unix.ELOOP):
		return nil, notFollowed(s.fd[w], name, path, "file")
	case err != nil:
		return nil, Errorf(ErrState, "reading state file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, Errorf(ErrState, "state file %s is not a regular file; remove it", path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, Errorf(ErrState, "reading state file %s: %w", path, err)
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
func (s *store) writeJSON(w where, name string, v any) error {
	path := s.path(w, name)
	b, err := encodeState(v)
	if err != nil {
		return Errorf(ErrState, "encoding %s: %w", path, err)
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
		return Errorf(ErrState, "writing %s: %w", path, err)
	}
	return nil
}

// stage writes b to a new file in tmp/ and syncs it.
func (s *store) stage(name string, b []byte) (string, error) {
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
func (s *store) has(w where, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(s.fd[w], name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, Errorf(ErrState, "checking %s: %w", s.path(w, name), err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false, notFollowed(s.fd[w], name, s.path(w, name), "file")
	}
	return true, nil
}

// remove unlinks a state file; unlinkat never follows a symlink.
func (s *store) remove(w where, name string) error {
	if err := unix.Unlinkat(s.fd[w], name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return Errorf(ErrState, "removing %s: %w", s.path(w, name), err)
	}
	return nil
}

func (s *store) readJournal() (*journal, error) {
	j := &journal{}
	ok, err := s.readJSON(top, journalName, j)
	if !ok || err != nil {
		return nil, err
	}
	return j, j.check(s.journalPath())
}

// records reads every attachment record; only GC and status need them all.
func (s *store) records() (map[string]*record, error) {
	names, err := s.list(inAtt)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*record, len(names))
	for _, n := range names {
		key, ok := strings.CutSuffix(n, ".json")
		if !ok {
			continue
		}
		r, err := s.readRecord(key)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out[key] = r
		}
	}
	return out, nil
}

// indexed lists the IPs that have an index entry.
func (s *store) indexed() ([]netip.Addr, error) {
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

// tmpPattern is the name of a file that writeJSON stages (and that older
// binaries' os.CreateTemp staged): a state file's name and a number.
// Compiled on first use, by GC: compiling it at start cost every ADD
// about 0.05 ms.
var tmpPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(journal|creating-device|status|[0-9a-f]{32}\.json|[0-9a-fA-F.:]+\.json)\.[0-9]+$`)
})

// sweepTmp removes the staged writes that a crash left behind, and nothing
// else: a file of another name in tmp/ is not ours to remove.
func (s *store) sweepTmp() error {
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
func (s *store) list(w where) ([]string, error) {
	var names []string
	err := s.scan(w, func(batch []string) bool { names = append(names, batch...); return true })
	return names, err
}

// anyIndexed tells whether any IP has an index entry, reading no more of
// ip/ than it needs to.
func (s *store) anyIndexed() (bool, error) {
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
func (s *store) scan(w where, f func([]string) bool) error {
	fd, err := unix.Openat(s.fd[w], ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Errorf(ErrState, "reading state directory %s: %w", s.path(w, ""), err)
	}
	dir := os.NewFile(uintptr(fd), s.path(w, ""))
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(64)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return Errorf(ErrState, "reading state directory %s: %w", s.path(w, ""), err)
		}
		if !f(names) {
			return nil
		}
	}
}

// writable proves that an ADD could write the state, and leaves nothing
// behind (STATUS changes nothing): where the device's tmp/ exists it stages
// and removes one file there, which also finds a full filesystem; where it
// does not, the deepest directory that exists on the way to it must be
// writable, as an ADD would create the rest under it.
func (s *store) writable() error {
	defer s.close()
	existing, err := s.openExisting()
	if err != nil {
		return err
	}
	if s.fd[inTmp] < 0 {
		if err := unix.Access(existing, unix.W_OK); err != nil {
			return Errorf(ErrState, "state directory %s: is not writable: %s: %w", s.dir, existing, err)
		}
		return nil
	}
	tmp, err := s.stage("status", []byte("{}"))
	if err != nil {
		return Errorf(ErrState, "state directory %s: is not writable: %w", s.dir, err)
	}
	return s.remove(inTmp, tmp)
}

// openExisting opens, making nothing, as much of dataDir/device/tmp as
// exists, each level checked as a lock would check it, and names the
// deepest directory that exists.
func (s *store) openExisting() (string, error) {
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

// withHolder returns holders with key added or removed, sorted, and whether
// it changed.
func withHolder(holders []string, key string, hold bool) ([]string, bool) {
	i, found := slices.BinarySearch(holders, key)
	switch {
	case hold && !found:
		return slices.Insert(slices.Clone(holders), i, key), true
	case !hold && found:
		return slices.Delete(slices.Clone(holders), i, i+1), true
	}
	return holders, false
}
