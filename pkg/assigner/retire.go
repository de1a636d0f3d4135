package assigner

import (
	"errors"
	"fmt"

	"github.com/external-ip/external-ip/pkg/store"
)

// Retire is for uninstall, once the plugin is no longer chained: when no
// record of this dataDir and device holds anything, it removes the holder
// device if it is ours and carries no address, and then runs also (what
// else uninstall removes) under the same lock, so that an ADD still in
// flight either finished before or finds everything gone. kept says in one
// line what stays and why; "" when nothing does.
func (a *Assigner) Retire(also func() (string, error)) (kept string, err error) {
	a.startCall()
	l, err := a.lockToRead()
	if err != nil {
		return "", err
	}
	if l != nil {
		defer l.Unlock()
		if kept, err := store.QuestionsOf(a.st).StillHeld(a.opts.Device); kept != "" || err != nil {
			return kept, err
		}
	}
	dev, err := a.holder.Find()
	if errors.Is(err, ErrRefused) {
		return fmt.Sprintf("device %s: kept: %v", a.opts.Device, err), nil
	}
	if err != nil {
		return "", err
	}
	if dev != 0 {
		addrs, err := a.k.HolderAddrs(dev)
		if err != nil {
			return "", err
		}
		if len(addrs) > 0 {
			return fmt.Sprintf("holder %s: kept: it carries %d addresses that no record holds (%v); external-ip repair removes them, then run uninstall again",
				a.opts.Device, len(addrs), addrs), nil
		}
		if _, err := a.k.RemoveHalfMade(a.opts.Device, a.holder.Alias()); err != nil {
			return "", err
		}
		a.log.Info("removed the holder device: ours and empty", "device", a.opts.Device)
	}
	if also == nil {
		return "", nil
	}
	return also()
}
