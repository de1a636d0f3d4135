package assigner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// canonicalDir resolves the symlinks of dir's longest existing prefix, so
// that /var/run/x and /run/x name one owner, whether or not dir exists yet.
func canonicalDir(dir string) string {
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

// alias is this invocation's holder alias, resolved once.
func (a *Assigner) alias() string {
	if a.ownAlias == "" {
		a.ownAlias = HolderAlias(canonicalDir(a.opts.DataDir))
	}
	return a.ownAlias
}

// ownedBy says whether alias names this invocation's dataDir. The common
// case, a dataDir written as the kernel resolves it, costs no file system
// call.
func (a *Assigner) ownedBy(alias string) bool {
	return alias == HolderAlias(filepath.Clean(a.opts.DataDir)) || alias == a.alias()
}

// judge says whether l is our holder: its index when ours, 0 when there is
// no such device, ErrRefused saying why when it is not ours.
func (a *Assigner) judge(l holderLink) (int, error) {
	name := a.opts.Device
	switch {
	case l.Index == 0:
		return 0, nil
	case l.Kind != "dummy" && l.Kind != "bridge":
		return 0, Errorf(ErrRefused, "device %s: is a %s device that external-ip did not create; choose another \"device\"", name, l.Kind)
	case l.Ports > 0:
		return 0, Errorf(ErrRefused, "device %s: is a bridge with %d ports, not an external-ip holder; choose another \"device\"", name, l.Ports)
	case l.Alias == legacyAlias || a.ownedBy(l.Alias):
		return l.Index, nil
	case strings.HasPrefix(l.Alias, ownerPath):
		return 0, Errorf(ErrRefused, "device %s: holds the external IPs of dataDir %s, and this network's dataDir is %s; give each dataDir its own \"device\"",
			name, strings.TrimPrefix(l.Alias, ownerPath), a.opts.DataDir)
	case strings.HasPrefix(l.Alias, ownerHash):
		return 0, Errorf(ErrRefused, "device %s: holds the external IPs of another dataDir (alias %q), and this network's dataDir is %s; give each dataDir its own \"device\"",
			name, l.Alias, a.opts.DataDir)
	case l.Alias != "":
		return 0, Errorf(ErrRefused, "device %s: is marked by someone else (alias %q); choose another \"device\"", name, l.Alias)
	}
	return 0, Errorf(ErrRefused, "device %s: exists and is not marked as an external-ip holder (no alias); choose another \"device\"", name)
}

// lookHolder asks the kernel about the holder once per invocation: screening
// and the locked part of an ADD share the answer.
func (a *Assigner) lookHolder() (holderLink, error) {
	if a.holder != nil {
		return *a.holder, nil
	}
	l, err := a.k.lookupHolder(a.opts.Device)
	if err != nil {
		return l, err
	}
	a.holder = &l
	return l, nil
}

// freshHolder forgets what lookHolder saw and asks again: for when another
// invocation may have made the holder since.
func (a *Assigner) freshHolder() (holderLink, error) {
	a.holder = nil
	return a.lookHolder()
}

// findHolder is the holder's index if it is ours, 0 when missing. It
// changes nothing. Once this invocation has made or taken the holder under
// the lock, that is the answer.
func (a *Assigner) findHolder() (int, error) {
	if a.dev != 0 {
		return a.dev, nil
	}
	l, err := a.lookHolder()
	if err != nil {
		return 0, err
	}
	return a.judge(l)
}

// releaseHolder is the device a release may take addresses off: ours, or 0
// when it is missing or has stopped being ours, so that the release only
// forgets. A kernel failure is still an error.
func (a *Assigner) releaseHolder() (int, error) {
	dev, err := a.findHolder()
	if errors.Is(err, ErrRefused) {
		a.log.Warn("holder device is not ours; releasing without touching it", "error", err)
		return 0, nil
	}
	return dev, err
}

// ensureHolder returns the holder device, creating it if missing, once per
// invocation, under the lock. A holder that screening saw ours and up is
// taken as seen; one it saw missing is looked at again, since another
// invocation may have made it meanwhile.
func (a *Assigner) ensureHolder() (int, error) {
	if a.dev != 0 {
		return a.dev, nil
	}
	l, err := a.lookHolder()
	if err == nil && l.Index == 0 {
		l, err = a.freshHolder()
	}
	if err != nil {
		return 0, err
	}
	var dev int
	if l.Index == 0 {
		dev, err = a.createNew()
	} else {
		dev, err = a.adoptHolder(l)
	}
	if err != nil {
		return 0, err
	}
	a.dev = dev
	return dev, nil
}

// adoptHolder takes an existing holder into use for ADD: claimed, and set
// up if down.
func (a *Assigner) adoptHolder(l holderLink) (int, error) {
	dev, err := a.claimHolder(l)
	if err != nil || l.Up {
		return dev, err
	}
	return dev, a.k.setHolderUp(dev)
}

// claimHolder refuses a device that is not ours and re-marks one carrying
// the old alias for this dataDir, which from then on owns it.
func (a *Assigner) claimHolder(l holderLink) (int, error) {
	dev, err := a.judge(l)
	if err != nil || l.Alias != legacyAlias {
		return dev, err
	}
	if err := a.k.markHolder(dev, a.alias()); err != nil {
		return 0, err
	}
	a.log.Info("holder device re-marked for its dataDir", "alias", a.alias())
	return dev, nil
}

// creating is the creating-device marker: the temporary name a holder is
// being made under. Only a device of that name is ever removed as half
// made; a device under the final name is never adopted on its strength.
type creating struct {
	Temp string `json:"temp"`
}

// createNew makes the holder under a unique temporary name, marked as ours
// before it is renamed to its final name: a crash at any point leaves at
// most a device under the name the marker records, which recoverHolder
// removes, and never an unmarked device under the final name.
func (a *Assigner) createNew() (int, error) {
	c := creating{Temp: tempName()}
	if err := a.st.Write(store.CreatingFile, c); err != nil {
		return 0, err
	}
	dev, err := a.k.createHolder(a.opts.Device, c.Temp, a.alias())
	if err != nil {
		if rerr := a.st.Remove(store.CreatingFile); rerr != nil {
			return 0, Errorf(ErrState, "%v; %v", err, rerr)
		}
		return 0, err
	}
	a.step("device")
	if err := a.k.renameHolder(dev, a.opts.Device); err != nil {
		return 0, a.dropHalfMade(c.Temp, err)
	}
	if err := a.k.setHolderUp(dev); err != nil {
		return 0, err
	}
	a.log.Info("holder device ready", "index", dev)
	return dev, a.st.Remove(store.CreatingFile)
}

// dropHalfMade removes the temporary device after a failed rename, and the
// marker once it is gone; cause stays the error.
func (a *Assigner) dropHalfMade(temp string, cause error) error {
	if _, err := a.k.removeHalfMade(temp, a.alias()); err != nil {
		return Errorf(ErrHost, "%v; %v", cause, err)
	}
	if err := a.st.Remove(store.CreatingFile); err != nil {
		return Errorf(ErrState, "%v; %v", cause, err)
	}
	return cause
}

// recoverHolder removes what a creation that crashed left: the device under
// the temporary name its marker records, then the marker. A marker of the
// old format (a JSON string, the device's final name) proves nothing about
// any device, so it is only removed.
func (a *Assigner) recoverHolder() error {
	var raw json.RawMessage
	ok, err := a.st.Read(store.CreatingFile, &raw)
	if err != nil || !ok {
		return err
	}
	var c creating
	if json.Unmarshal(raw, &c) == nil && strings.HasPrefix(c.Temp, tempPrefix) {
		removed, err := a.k.removeHalfMade(c.Temp, a.alias())
		if err != nil {
			return err
		}
		if removed {
			a.log.Warn("removed a half-made holder device", "name", c.Temp)
		}
	}
	return a.st.Remove(store.CreatingFile)
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
		return nil, Errorf(ErrHost, "listing links: %w", err)
	}
	want := []string{HolderAlias(filepath.Clean(dataDir)), HolderAlias(canonicalDir(dataDir))}
	var out []string
	for _, l := range links {
		if slices.Contains(want, l.Attrs().Alias) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// StateDevices are the devices with state in dataDir and the holders
// marked as dataDir's, whose state may have been lost.
func StateDevices(dataDir string) ([]string, error) {
	devs, err := store.Devices(dataDir)
	if err != nil {
		return nil, err
	}
	held, err := Holders(dataDir)
	if err != nil {
		return nil, err
	}
	for _, d := range held {
		if !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	return devs, nil
}
