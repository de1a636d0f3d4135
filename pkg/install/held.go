package install

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/standby"
	"github.com/external-ip/external-ip/pkg/store"
)

// ErrHeld: pods still hold external IPs; Uninstall changed nothing.
var ErrHeld = errors.New("pods still hold external IPs")

// stateLockWait bounds the wait for a holder's state lock.
const stateLockWait = 10 * time.Second

// holding is what one holder device's state holds at uninstall.
type holding struct {
	device string
	// pending is the journal of an interrupted change (which may be an
	// ADD), "" when none.
	pending string
	// live are the records whose container may still be there, gone
	// those whose container is provably gone.
	live, gone []*store.Record
}

func (h holding) held() bool { return h.pending != "" || len(h.live) > 0 }

// refuseWhileHeld fails with ErrHeld, naming each holder, while pods hold
// external IPs of the dataDir. containerd runs a pod's DEL with the
// networks it has loaded now (go-cni's Remove), not with those the pod was
// created with: once the configs are restored, those pods' DELs would
// never call the plugin and their IPs would stay held for good. So our
// entry and the binary stay until the DELs have run. (CRI-O's ocicni runs
// DEL with the config libcni cached at ADD; there this is only caution.)
// A pod whose network namespace is gone will get no DEL that helps
// (a runtime crash lost it): its IPs are released first, as GC releases
// them, and it holds nothing up. With Force it goes on, saying what it
// leaves held. Without Retire or DataDir (tests on temp dirs) no dataDir
// is looked at.
//
// What remains open: an ADD whose runtime read our entry before the
// restore and records its IP after this check. Holding the state's lock
// across the check and the restore would not close it: that ADD would
// wait for the lock and record its IP all the same, after the restore.
// Closing it needs the ADD itself to refuse, under that lock, once an
// uninstall has begun, which it cannot see: the mark is in the conf dir,
// which a CNI call is not told of. A second mark in the dataDir, read by
// every ADD and cleared by install, would do it; it is not built, since a
// mark left behind (an uninstall followed by a hand-made install) would
// fail every ADD of the node until a reboot.
func (i *Installer) refuseWhileHeld(u *undo) error {
	if !i.Retire && i.DataDir == "" {
		return nil
	}
	dataDir := i.retireDataDir(u)
	devs, err := store.Devices(dataDir)
	if err != nil {
		return err
	}
	var held []holding
	for _, d := range devs {
		h, err := i.holdingAfterGone(dataDir, d)
		if err != nil {
			return err
		}
		if h.held() {
			held = append(held, h)
		}
	}
	switch {
	case len(held) == 0:
		return nil
	case i.Force:
		return i.leaveHeld(dataDir, held)
	}
	return i.refusal(dataDir, held)
}

// refusal is ErrHeld naming what each holder holds and what to do.
func (i *Installer) refusal(dataDir string, held []holding) error {
	var lines []string
	for _, h := range held {
		lines = append(lines, h.line(dataDir))
	}
	run, err := i.uninstallCommand()
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %s; nothing changed, and external-ip stays chained so that their DELs release them: drain the node or delete those pods, then run %s again (with --force it uninstalls and leaves them held)",
		ErrHeld, strings.Join(lines, "; "), run)
}

// line says in one line what h holds.
func (h holding) line(dataDir string) string {
	if h.pending != "" {
		return fmt.Sprintf("holder %s: an interrupted change is pending in %s, which external-ip repair settles", h.device, h.pending)
	}
	ips := map[string]bool{}
	for _, r := range h.live {
		for _, ip := range r.Held() {
			ips[ip.String()] = true
		}
	}
	return fmt.Sprintf("holder %s: %d attachments hold %d external IPs (external-ip status --data-dir %s lists them)", h.device, len(h.live), len(ips), dataDir)
}

// uninstallCommand is the command that runs this uninstall again.
func (i *Installer) uninstallCommand() (string, error) {
	run, err := i.rerunPath()
	if err != nil {
		return "", err
	}
	run = fmt.Sprintf("%s uninstall --bin-dir %s --conf-dir %s", run, i.BinDir, i.ConfDir)
	if i.DataDir != "" {
		run += " --data-dir " + i.DataDir
	}
	return run, nil
}

// holdingAfterGone is what device's state holds once the records of
// containers that are gone are released, as GC releases stale records.
func (i *Installer) holdingAfterGone(dataDir, device string) (holding, error) {
	before, err := readHolding(dataDir, device)
	if err != nil || len(before.gone) == 0 {
		return before, err
	}
	err = i.operator(dataDir, device).Collect(containerGone)
	after, rerr := readHolding(dataDir, device)
	if rerr == nil {
		i.logReleased(device, before.gone, after) // also when others failed
	}
	if err = errors.Join(err, rerr); err != nil {
		return after, fmt.Errorf("holder %s: releasing the IPs of pods whose network namespace is gone: %w", device, err)
	}
	return after, nil
}

// logReleased names each of gone that after no longer holds.
func (i *Installer) logReleased(device string, gone []*store.Record, after holding) {
	left := map[store.Attachment]bool{}
	for _, r := range append(after.live, after.gone...) {
		left[r.Attachment] = true
	}
	for _, r := range gone {
		if !left[r.Attachment] {
			i.log().Warn("released the IPs of a pod whose network namespace is gone without its DEL",
				"holder", device, "attachment", r.Attachment.String(), "ips", fmt.Sprint(r.Held()), "netns", r.Netns.Path)
		}
	}
}

// operator is the assigner that releases records at uninstall.
func (i *Installer) operator(dataDir, device string) *assigner.Assigner {
	if i.Assigner != nil {
		return i.Assigner(dataDir, device, i.log())
	}
	return assigner.New(assigner.Options{Device: device, DataDir: dataDir, LockTimeout: stateLockWait, Log: i.log()})
}

// containerGone says whether r's container is provably gone: the network
// namespace its ADD recorded is no more. A record that names none (of an
// older release, or of an ADD that could not look at it) may be a live
// pod's, and counts as held.
func containerGone(_ string, r *store.Record) bool {
	return r.Netns != nil && standby.NetnsGone(*r.Netns)
}

// readHolding reads what device's state holds, under its lock.
func readHolding(dataDir, device string) (holding, error) {
	h := holding{device: device}
	s := store.New(dataDir, device)
	l, err := s.Lock(store.ReadOnly, stateLockWait)
	if err != nil || l == nil {
		return h, err
	}
	defer l.Unlock()
	if pending, err := s.Has(store.JournalFile); err != nil || pending {
		if pending {
			h.pending = s.Path(store.JournalFile)
		}
		return h, err
	}
	recs, err := s.Records()
	if err != nil {
		return h, err
	}
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		if containerGone(key, recs[key]) {
			h.gone = append(h.gone, recs[key])
		} else {
			h.live = append(h.live, recs[key])
		}
	}
	slices.SortFunc(h.live, func(a, b *store.Record) int { return cmp.Compare(a.Attachment.String(), b.Attachment.String()) })
	return h, nil
}

// leaveHeld is a forced uninstall's word on what it leaves: each IP still
// held, and how to release it once the pod's DEL no longer reaches the
// plugin. It changes nothing.
func (i *Installer) leaveHeld(dataDir string, held []holding) error {
	bin, err := i.rerunPath()
	if err != nil {
		return err
	}
	again, err := i.uninstallCommand()
	if err != nil {
		return err
	}
	for _, h := range held {
		if h.pending != "" {
			i.log().Warn("left pending: an interrupted change", "holder", h.device, "journal", h.pending,
				"release", fmt.Sprintf("%s repair --data-dir %s --device %s", bin, dataDir, h.device))
		}
		for _, r := range h.live {
			i.log().Warn("left held: the pod's DEL no longer reaches external-ip", "holder", h.device,
				"attachment", r.Attachment.String(), "ips", fmt.Sprint(r.Held()), "release", i.releaseLater(bin, again, dataDir, h.device, r))
		}
	}
	return nil
}

// releaseLater says how to release r without its DEL: a DEL by hand, which
// needs only the keys a DEL uses, or, for a record that names its network
// namespace, uninstall run again once the pod is gone.
func (i *Installer) releaseLater(bin, again, dataDir, device string, r *store.Record) string {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":%q,"dataDir":%q,"device":%q}`, r.Network, PluginType, dataDir, device)
	del := fmt.Sprintf("echo '%s' | CNI_COMMAND=DEL CNI_CONTAINERID=%s CNI_IFNAME=%s CNI_PATH=%s %s",
		conf, r.ContainerID, r.IfName, i.BinDir, bin)
	if r.Netns == nil {
		return del
	}
	return fmt.Sprintf("once the pod is deleted (%s gone), run %s again; or now: %s", r.Netns.Path, again, del)
}
