package assigner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
}

// ipEntry is the index of one IP: who holds it and where it is announced.
// len(Holders) is the IP's reference count.
type ipEntry struct {
	Holders []string `json:"holders"`
	Uplink  string   `json:"uplink,omitempty"`
}

// journal is one change under way. Applying it is idempotent, so replaying
// it after a crash at any point finishes the change.
type journal struct {
	Key string `json:"key"`
	// Record is the attachment's new record; nil releases the attachment.
	Record *record `json:"record"`
	// Touch lists every IP whose holders may change: old and new IPs.
	Touch []netip.Addr `json:"touch"`
	// Uplinks names the uplink chosen for IPs that had no holder yet.
	Uplinks map[netip.Addr]string `json:"uplinks,omitempty"`
}

// store is the state directory of one holder device.
type store struct {
	dir string
}

const (
	dirMode  = 0o700
	fileMode = 0o600
)

func (s *store) journalPath() string          { return filepath.Join(s.dir, "journal") }
func (s *store) attDir() string               { return filepath.Join(s.dir, "att") }
func (s *store) ipDir() string                { return filepath.Join(s.dir, "ip") }
func (s *store) tmpDir() string               { return filepath.Join(s.dir, "tmp") }
func (s *store) recordPath(key string) string { return filepath.Join(s.attDir(), key+".json") }
func (s *store) ipPath(ip netip.Addr) string  { return filepath.Join(s.ipDir(), ip.String()+".json") }
func (s *store) lockPath() string             { return filepath.Join(s.dir, "lock") }
func (s *store) creatingPath() string         { return filepath.Join(s.dir, "creating-device") }
func (s *store) exists() bool                 { _, err := os.Stat(s.dir); return err == nil }
func (s *store) subdirs() []string            { return []string{s.dir, s.tmpDir(), s.attDir(), s.ipDir()} }

func (s *store) readRecord(key string) (*record, error) {
	r := &record{}
	ok, err := readJSON(s.recordPath(key), r)
	if !ok {
		r = nil
	}
	return r, err
}

func (s *store) readIP(ip netip.Addr) (ipEntry, error) {
	var e ipEntry
	_, err := readJSON(s.ipPath(ip), &e)
	// Sorted and unique, so that withHolder can search it even after a
	// hand edit.
	slices.Sort(e.Holders)
	e.Holders = slices.Compact(e.Holders)
	return e, err
}

func (s *store) readJournal() (*journal, error) {
	j := &journal{}
	ok, err := readJSON(s.journalPath(), j)
	if !ok {
		j = nil
	}
	return j, err
}

// writeIP stores an IP's entry, or removes it once nobody holds the IP.
func (s *store) writeIP(ip netip.Addr, e ipEntry) error {
	if len(e.Holders) == 0 {
		return s.remove(s.ipPath(ip))
	}
	return s.writeJSON(s.ipPath(ip), e)
}

// init makes the directories; only ADD calls it, so that DEL, CHECK and GC of
// a device never used leave nothing behind.
func (s *store) init() error {
	for _, d := range s.subdirs() {
		if err := os.MkdirAll(d, dirMode); err != nil {
			return Errorf(ErrState, "creating state directory %s: %w", d, err)
		}
	}
	return nil
}

// readJSON decodes path into v; a missing file is (false, nil). A file that
// exists but does not decode is an error naming it: state is never reset
// silently.
func readJSON(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, Errorf(ErrState, "reading state file %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, Errorf(ErrState, "state file %s is corrupt: %v; see the README's recovery section", path, err)
	}
	return true, nil
}

// writeJSON replaces path atomically: a crash leaves the old or the new
// content, never a torn file.
func (s *store) writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return Errorf(ErrState, "encoding %s: %w", path, err)
	}
	f, err := os.CreateTemp(s.tmpDir(), filepath.Base(path)+".*")
	if err != nil {
		return Errorf(ErrState, "writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return Errorf(ErrState, "writing %s: %w", path, err)
	}
	return nil
}

func (s *store) remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Errorf(ErrState, "removing %s: %w", path, err)
	}
	return nil
}

// records reads every attachment record; only GC and status need them all.
func (s *store) records() (map[string]*record, error) {
	names, err := listDir(s.attDir())
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
	names, err := listDir(s.ipDir())
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

// sweepTmp removes staged writes that a crash left behind.
func (s *store) sweepTmp() error {
	names, err := listDir(s.tmpDir())
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := s.remove(filepath.Join(s.tmpDir(), n)); err != nil {
			return err
		}
	}
	return nil
}

func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, Errorf(ErrState, "reading state directory %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
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
