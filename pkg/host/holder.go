package host

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/external-ip/external-ip/pkg/store"
)

// The holder's alias says that the device is ours and which state
// directory owns it: two networks that name one device from two dataDirs
// would otherwise each take the other's addresses for strays.
const (
	// HolderMark begins every alias of ours, whatever its format.
	HolderMark = "external-ip holder: "
	// legacyAlias marked holders before the alias named the dataDir. A
	// holder carrying it is ours; the next write re-marks it for its dataDir.
	legacyAlias = HolderMark + "managed by the external-ip CNI plugin"
	ownerPath   = HolderMark + "state in "
	ownerHash   = HolderMark + "state sha256:"
	// maxAlias is the kernel's limit (IFALIASZ less its NUL).
	maxAlias = 255
)

// HolderAlias is the alias of a holder whose state lives in dataDir: the
// directory itself when it fits, else a hash of it.
func HolderAlias(dataDir string) string {
	if alias := ownerPath + dataDir; len(alias) <= maxAlias {
		return alias
	}
	sum := sha256.Sum256([]byte(dataDir))
	return ownerHash + hex.EncodeToString(sum[:16])
}

// CanonicalDir resolves the symlinks of dir's longest existing prefix, so
// that /var/run/x and /run/x name one owner, whether or not dir exists yet.
func CanonicalDir(dir string) string {
	dir = filepath.Clean(dir)
	rest := ""
	for {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join(dir, rest)
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// Device names a holder device and what keeping it needs.
type Device struct {
	Name string
	// DataDir owns the device: its alias names it.
	DataDir string
	// State keeps the creating-device marker while the device is made.
	State *store.Store
	Log   *slog.Logger
	// Step is called at the step "device" (made, not yet renamed), where
	// the crash tests kill a call.
	Step func(name string)
}

// Holder is the holder device as one call finds it: what the kernel said
// about it is asked once per call, and kept for that call alone (between
// two calls another invocation may change anything).
type Holder struct {
	k Kernel
	Device
	// dev is the holder once made or checked under the lock; seen is what
	// the kernel said about it (see Look); alias is this dataDir's alias,
	// its symlinks resolved.
	dev   int
	seen  *Link
	alias string
}

// NewHolder begins a call's view of the holder d, knowing nothing yet.
func NewHolder(k Kernel, d Device) *Holder { return &Holder{k: k, Device: d} }

// Alias is this invocation's holder alias, resolved once.
func (h *Holder) Alias() string {
	if h.alias == "" {
		h.alias = HolderAlias(CanonicalDir(h.DataDir))
	}
	return h.alias
}

// OwnedBy says whether alias names this invocation's dataDir. The common
// case, a dataDir written as the kernel resolves it, costs no file system
// call.
func (h *Holder) OwnedBy(alias string) bool {
	return alias == HolderAlias(filepath.Clean(h.DataDir)) || alias == h.Alias()
}

// Judge says whether l is our holder: its index when ours, 0 when there is
// no such device, ErrRefused saying why when it is not ours.
func (h *Holder) Judge(l Link) (int, error) {
	name := h.Name
	switch {
	case l.Index == 0:
		return 0, nil
	case l.Kind != "dummy" && l.Kind != "bridge":
		return 0, errorf(ErrRefused, "device %s: is a %s device that external-ip did not create; choose another \"device\"", name, l.Kind)
	case l.Ports > 0:
		return 0, errorf(ErrRefused, "device %s: is a bridge with %d ports, not an external-ip holder; choose another \"device\"", name, l.Ports)
	case l.Alias == legacyAlias || h.OwnedBy(l.Alias):
		return l.Index, nil
	case strings.HasPrefix(l.Alias, ownerPath):
		return 0, errorf(ErrRefused, "device %s: holds the external IPs of dataDir %s, and this network's dataDir is %s; give each dataDir its own \"device\"",
			name, strings.TrimPrefix(l.Alias, ownerPath), h.DataDir)
	case strings.HasPrefix(l.Alias, ownerHash):
		return 0, errorf(ErrRefused, "device %s: holds the external IPs of another dataDir (alias %q), and this network's dataDir is %s; give each dataDir its own \"device\"",
			name, l.Alias, h.DataDir)
	case l.Alias != "":
		return 0, errorf(ErrRefused, "device %s: is marked by someone else (alias %q); choose another \"device\"", name, l.Alias)
	}
	return 0, errorf(ErrRefused, "device %s: exists and is not marked as an external-ip holder (no alias); choose another \"device\"", name)
}

// Look asks the kernel about the holder once per invocation: screening
// and the locked part of an ADD share the answer.
func (h *Holder) Look() (Link, error) {
	if h.seen != nil {
		return *h.seen, nil
	}
	l, err := h.k.LookupHolder(h.Name)
	if err != nil {
		return l, err
	}
	h.seen = &l
	return l, nil
}

// Fresh forgets what Look saw and asks again: for when another
// invocation may have made the holder since.
func (h *Holder) Fresh() (Link, error) {
	h.seen = nil
	return h.Look()
}

// Find is the holder's index if it is ours, 0 when missing. It
// changes nothing. Once this invocation has made or taken the holder under
// the lock, that is the answer.
func (h *Holder) Find() (int, error) {
	if h.dev != 0 {
		return h.dev, nil
	}
	l, err := h.Look()
	if err != nil {
		return 0, err
	}
	return h.Judge(l)
}

// ForRelease is the device a release may take addresses off: ours, or 0
// when it is missing or has stopped being ours, so that the release only
// forgets. A kernel failure is still an error.
func (h *Holder) ForRelease() (int, error) {
	dev, err := h.Find()
	if errors.Is(err, ErrRefused) {
		h.Log.Warn("holder device is not ours; releasing without touching it", "error", err)
		return 0, nil
	}
	return dev, err
}

// Ensure returns the holder device, creating it if missing, once per
// invocation, under the lock. A holder that screening saw ours and up is
// taken as seen; one it saw missing is looked at again, since another
// invocation may have made it meanwhile.
func (h *Holder) Ensure() (int, error) {
	if h.dev != 0 {
		return h.dev, nil
	}
	l, err := h.Look()
	if err == nil && l.Index == 0 {
		l, err = h.Fresh()
	}
	if err != nil {
		return 0, err
	}
	var dev int
	if l.Index == 0 {
		dev, err = h.create()
	} else {
		dev, err = h.adopt(l)
	}
	if err != nil {
		return 0, err
	}
	h.dev = dev
	return dev, nil
}

// adopt takes an existing holder into use for ADD: claimed, and set
// up if down.
func (h *Holder) adopt(l Link) (int, error) {
	dev, err := h.Claim(l)
	if err != nil || l.Up {
		return dev, err
	}
	return dev, h.k.SetHolderUp(dev)
}

// Claim refuses a device that is not ours and re-marks one carrying
// the old alias for this dataDir, which from then on owns it.
func (h *Holder) Claim(l Link) (int, error) {
	dev, err := h.Judge(l)
	if err != nil || l.Alias != legacyAlias {
		return dev, err
	}
	if err := h.k.MarkHolder(dev, h.Alias()); err != nil {
		return 0, err
	}
	h.Log.Info("holder device re-marked for its dataDir", "alias", h.Alias())
	return dev, nil
}

// creating is the creating-device marker: the temporary name a holder is
// being made under. Only a device of that name is ever removed as half
// made; a device under the final name is never adopted on its strength.
type creating struct {
	Temp string `json:"temp"`
}

// create makes the holder under a unique temporary name, marked as ours
// before it is renamed to its final name: a crash at any point leaves at
// most a device under the name the marker records, which Recover
// removes, and never an unmarked device under the final name.
func (h *Holder) create() (int, error) {
	c := creating{Temp: tempName()}
	if err := h.State.Write(store.CreatingFile, c); err != nil {
		return 0, err
	}
	dev, err := h.k.CreateHolder(h.Name, c.Temp, h.Alias())
	if err != nil {
		if rerr := h.State.Remove(store.CreatingFile); rerr != nil {
			return 0, errorf(store.ErrState, "%v; %v", err, rerr)
		}
		return 0, err
	}
	h.Step("device")
	if err := h.k.RenameHolder(dev, h.Name); err != nil {
		return 0, h.dropHalfMade(c.Temp, err)
	}
	if err := h.k.SetHolderUp(dev); err != nil {
		return 0, err
	}
	h.Log.Info("holder device ready", "index", dev)
	return dev, h.State.Remove(store.CreatingFile)
}

// dropHalfMade removes the temporary device after a failed rename, and the
// marker once it is gone; cause stays the error.
func (h *Holder) dropHalfMade(temp string, cause error) error {
	if _, err := h.k.RemoveHalfMade(temp, h.Alias()); err != nil {
		return errorf(ErrHost, "%v; %v", cause, err)
	}
	if err := h.State.Remove(store.CreatingFile); err != nil {
		return errorf(store.ErrState, "%v; %v", cause, err)
	}
	return cause
}

// Recover removes what a creation that crashed left: the device under
// the temporary name its marker records, then the marker. A marker of the
// old format (a JSON string, the device's final name) proves nothing about
// any device, so it is only removed.
func (h *Holder) Recover() error {
	var raw json.RawMessage
	ok, err := h.State.Read(store.CreatingFile, &raw)
	if err != nil || !ok {
		return err
	}
	var c creating
	if json.Unmarshal(raw, &c) == nil && strings.HasPrefix(c.Temp, tempPrefix) {
		removed, err := h.k.RemoveHalfMade(c.Temp, h.Alias())
		if err != nil {
			return err
		}
		if removed {
			h.Log.Warn("removed a half-made holder device", "name", c.Temp)
		}
	}
	return h.State.Remove(store.CreatingFile)
}

// tempPrefix begins every temporary holder name.
const tempPrefix = "eipnew"

// tempName is a device name no one else uses: tempPrefix and 8 random hex
// digits, 14 bytes, within the kernel's 15.
func tempName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return tempPrefix + hex.EncodeToString(b)
}

// Holders names the devices marked as holders of dataDir, so that the
// operator's repair finds a holder whose state directory was lost. It
// lists every link: for the command line, never for a CNI call.
func Holders(dataDir string) ([]string, error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, errorf(ErrHost, "listing links: %w", err)
	}
	want := []string{HolderAlias(filepath.Clean(dataDir)), HolderAlias(CanonicalDir(dataDir))}
	var out []string
	for _, l := range links {
		if slices.Contains(want, l.Attrs().Alias) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}
