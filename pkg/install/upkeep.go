package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
)

// Upkeep is the node's optional periodic work, done beside the CNI path and
// never needed by it: re-announcing every held IP (switches age out their
// forwarding entries long before routers age out ARP, so a quiet IP goes
// unreachable) and repairing drift as `external-ip repair` does.
type Upkeep struct {
	DataDir         string
	ReannounceEvery time.Duration // 0: never
	RepairEvery     time.Duration // 0: never
	LockTimeout     time.Duration
	Log             *slog.Logger
}

// Run does each enabled job at its period until ctx ends.
func (u *Upkeep) Run(ctx context.Context) {
	tick := func(d time.Duration) <-chan time.Time {
		if d <= 0 {
			return nil // a nil channel never fires: the job is off
		}
		t := time.NewTicker(d)
		context.AfterFunc(ctx, t.Stop)
		return t.C
	}
	reannounce, repair := tick(u.ReannounceEvery), tick(u.RepairEvery)
	for {
		select {
		case <-ctx.Done():
			return
		case <-reannounce:
			u.logErr("re-announcing", u.Reannounce())
		case <-repair:
			u.logErr("repairing", u.Repair())
		}
	}
}

func (u *Upkeep) logErr(what string, err error) {
	if err != nil {
		u.log().Error(what+" failed", "error", err)
	}
}

func (u *Upkeep) log() *slog.Logger {
	if u.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return u.Log
}

// devices are the holder devices with state under DataDir.
func (u *Upkeep) devices() ([]string, error) {
	entries, err := os.ReadDir(u.DataDir)
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u.DataDir, err)
	}
	var devs []string
	for _, e := range entries {
		if e.IsDir() { // a symlink is not a directory entry here: not followed
			devs = append(devs, e.Name())
		}
	}
	return devs, nil
}

func (u *Upkeep) assigner(dev string) *assigner.Assigner {
	return assigner.New(assigner.Options{Device: dev, DataDir: u.DataDir, LockTimeout: u.LockTimeout, Log: u.log()})
}

// eachDevice runs f with the report of every holder device with state; a
// device that fails does not stop the others.
func (u *Upkeep) eachDevice(f func(as *assigner.Assigner, rep *assigner.Report) error) error {
	devs, err := u.devices()
	if err != nil {
		return err
	}
	var errs []error
	for _, dev := range devs {
		as := u.assigner(dev)
		rep, err := as.Report()
		if err == nil {
			err = f(as, rep)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dev, err))
		}
	}
	return errors.Join(errs...)
}

// Reannounce sends one announcement round for every held IP on the uplink
// it was announced on, read from the state as `external-ip status` reads it.
func (u *Upkeep) Reannounce() error {
	return u.eachDevice(func(_ *assigner.Assigner, rep *assigner.Report) error {
		byUplink := map[string][]netip.Addr{}
		for _, ip := range rep.IPs {
			if ip.Uplink != "" && ip.OnDevice {
				byUplink[ip.Uplink] = append(byUplink[ip.Uplink], ip.Addr)
			}
		}
		var errs []error
		for name, ips := range byUplink {
			errs = append(errs, u.announce(name, ips))
		}
		return errors.Join(errs...)
	})
}

func (u *Upkeep) announce(name string, ips []netip.Addr) error {
	up, err := uplink(name)
	if err != nil {
		return err
	}
	s := announce.NewSender(up)
	err = s.Round(ips)
	s.Close()
	if err != nil {
		return fmt.Errorf("re-announcing %v on %s: %w", ips, name, err)
	}
	u.log().Info("re-announced", "uplink", name, "ips", ips)
	return nil
}

// uplink looks up the interface by name as it is now: its index or MAC
// may have changed since the IP was first announced.
func uplink(name string) (announce.Uplink, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return announce.Uplink{}, fmt.Errorf("uplink %q: %w", name, err)
	}
	up := announce.Uplink{Name: ifi.Name, Index: ifi.Index, MAC: ifi.HardwareAddr}
	fwd, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifi.Name + "/forwarding")
	up.Router = err == nil && strings.TrimSpace(string(fwd)) == "1"
	return up, nil
}

// Repair repairs each device whose report shows drift, under the state
// lock, and logs the drift it fixed. A device without drift is not touched.
func (u *Upkeep) Repair() error {
	return u.eachDevice(func(as *assigner.Assigner, rep *assigner.Report) error {
		if len(rep.Drift) == 0 {
			return nil
		}
		if err := as.Repair(); err != nil {
			return fmt.Errorf("repairing: %w", err)
		}
		u.log().Info("repaired drift", "device", rep.Device, "fixed", rep.Drift)
		return nil
	})
}
