package upkeep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/report"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// Upkeep is the node's optional periodic work, done beside the CNI path and
// never needed by it: re-announcing every held IP (switches age out their
// forwarding entries long before routers age out ARP, so a quiet IP goes
// unreachable) and repairing drift as `external-ip repair` does.
type Upkeep struct {
	DataDir         string
	ReannounceEvery time.Duration // 0: never
	RepairEvery     time.Duration // 0: never
	// WatchEvery is how often the held IPs are read for the conflict
	// watch and the Recorder; 0: no conflict watch.
	WatchEvery  time.Duration
	LockTimeout time.Duration
	Log         *slog.Logger
	// Recorder is told what the upkeep does; nil: nobody.
	Recorder Recorder
	// Listen opens an uplink's receiving sockets; nil: raw packet sockets.
	Listen ListenFunc
	// Links subscribes to the node's link events, by which the repair
	// (RepairEvery set) puts back at once what an uplink that went down
	// lost; nil: netlink. It needs the conflict watch (WatchEvery set),
	// whose read of the state says which links are uplinks.
	Links LinkFunc
	// UplinkRouting is the plugin entry's uplinkRouting, with which the
	// repair reads and mends the routing of external IPs on uplinks other
	// than the default route's; a zero Route.Mask means the defaults.
	UplinkRouting config.UplinkRouting

	beforeRound  func(uplink string) // tests only: a release between report and round
	beforeRepair func(device string) // tests only: a fix between report and repair
	clock        func() time.Time    // tests only

	// next carries the entry Use gives to Run (the latest wins).
	nextOnce sync.Once
	next     chan Entry
}

// Entry is what the upkeep takes from the plugin entry: where the plugin
// keeps its state, and how it routes the uplinks that are not the
// default route's (marks, tables, priorities and gateways).
type Entry struct {
	DataDir       string
	UplinkRouting config.UplinkRouting
}

// Use makes the running upkeep work with e from its next job on: the
// plugin entry was reloaded, and the plugin now keeps its state and routes
// as e says. Run takes it between two jobs, so that a job never sees half
// of each; the latest of several not yet taken wins. Use is for one
// goroutine (the entry's watcher) beside Run's.
func (u *Upkeep) Use(e Entry) {
	c := u.entries()
	for {
		select {
		case c <- e:
			return
		default:
			select { // an older entry Run has not taken: e replaces it
			case <-c:
			default:
			}
		}
	}
}

func (u *Upkeep) entries() chan Entry {
	u.nextOnce.Do(func() { u.next = make(chan Entry, 1) })
	return u.next
}

// take switches to e, on Run's goroutine.
func (u *Upkeep) take(e Entry) {
	u.DataDir, u.UplinkRouting = e.DataDir, e.UplinkRouting
	r := e.UplinkRouting.Route
	u.log().Info("the upkeep follows the new plugin entry", "dataDir", e.DataDir,
		"mark", fmt.Sprintf("%#x", r.Mask), "table", r.Table, "priority", r.Priority, "gateways", fmt.Sprint(e.UplinkRouting.Gateways))
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
	reannounce, repair, held := tick(u.ReannounceEvery), tick(u.RepairEvery), tick(u.WatchEvery)
	w := u.newWatch(ctx)
	defer w.close()
	bounced := u.followLinks(ctx, w)
	if u.WatchEvery > 0 {
		u.logErr("reading the held IPs", w.refresh())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-reannounce:
			u.logErr("re-announcing", u.Reannounce())
		case <-repair:
			u.logErr("repairing", u.Repair())
		case name := <-bounced:
			u.log().Info("an uplink came up again: repairing its proxy entries now", "uplink", name)
			u.logErr("repairing", u.Repair())
		case <-held:
			u.logErr("reading the held IPs", w.refresh())
		case e := <-u.entries():
			u.take(e)
			if u.WatchEvery > 0 {
				u.logErr("reading the held IPs", w.refresh())
			}
		case f := <-w.frames:
			w.c.seen(f.uplink, f.data, u.now())
		}
	}
}

// followLinks starts the link watch when both the repair and the conflict
// watch are on, and returns where it signals; nil (never) otherwise.
func (u *Upkeep) followLinks(ctx context.Context, w *watch) <-chan string {
	if u.RepairEvery <= 0 || u.WatchEvery <= 0 {
		return nil
	}
	links := u.Links
	if links == nil {
		links = subscribeLinks
	}
	out := make(chan string, 1)
	w.bounces = newBounces()
	go w.bounces.follow(ctx, links, out, u.logErr)
	return out
}

// logErr logs err on one line, however many devices failed at once.
func (u *Upkeep) logErr(what string, err error) {
	if err != nil {
		u.log().Error(what+" failed", "error", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}

func (u *Upkeep) log() *slog.Logger {
	if u.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return u.Log
}

// devices are the holder devices with state under DataDir.
func (u *Upkeep) devices() ([]string, error) { return store.Devices(u.DataDir) }

// assigner works on dev; done releases it. Re-announcing needs no
// nftables (nat nil); repairing passes the host's, and routes as the
// plugin entry says, as `external-ip repair` does, or drift in table inet
// external-ip and in the uplink routing would never be seen or fixed. The
// routing is made anew for each round: it keeps what it reads of the
// main table and of our tables for as long as it lives.
func (u *Upkeep) assigner(dev string, nat *steer.HostTable) (as *assigner.Assigner, done func()) {
	o := assigner.Options{Device: dev, DataDir: u.DataDir, LockTimeout: u.LockTimeout, Log: u.log()}
	if nat == nil {
		as = assigner.New(o)
		return as, as.Close
	}
	r := u.UplinkRouting
	if r.Route.Mask == 0 {
		r.Route = slots.Default()
	}
	routing := uplinkroute.NewHostRouting(nat, r.Route, r.Gateways, r.Off)
	o.NAT, o.Routing = nat, routing
	as = assigner.New(o)
	return as, func() { as.Close(); routing.Close() }
}

// eachDevice runs f with the report of every holder device with state; a
// device that fails does not stop the others. Each Assigner is closed after
// its round: this process lives as long as the node.
func (u *Upkeep) eachDevice(devs []string, nat *steer.HostTable, f func(as *assigner.Assigner, rep *assigner.Report) error) error {
	var errs []error
	for _, dev := range devs {
		as, done := u.assigner(dev, nat)
		rep, err := as.Report()
		if err == nil {
			err = f(as, rep)
		}
		done()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dev, err))
		}
	}
	return errors.Join(errs...)
}

// Reannounce sends one announcement round for every held IP on the uplink
// it was announced on, read from the state as `external-ip status` reads it.
func (u *Upkeep) Reannounce() error {
	devs, err := u.devices()
	if err != nil {
		return err
	}
	return u.eachDevice(devs, nil, func(as *assigner.Assigner, rep *assigner.Report) error {
		var errs []error
		for name, ips := range onHolderByUplink(rep) {
			errs = append(errs, u.announce(as, name, ips, ReasonPeriodic))
		}
		return errors.Join(errs...)
	})
}

// onHolderByUplink groups the IPs on the holder by the uplink they were
// announced on.
func onHolderByUplink(rep *assigner.Report) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, ip := range rep.IPs {
		if ip.Uplink != "" && ip.OnDevice && len(ip.Holders) > 0 {
			out[ip.Uplink] = append(out[ip.Uplink], ip.Addr)
		}
	}
	return out
}

// announce sends a round on uplink name for the IPs still held there. The
// report was read under a lock since released: a DEL may have released an
// IP meanwhile, and once a release returns no round may announce what it
// released (another node may take the IP). So the round is sent under the
// state lock, for the IPs whose index then lists any holder on this
// uplink: one whose first holder left while another holds it keeps its
// round.
func (u *Upkeep) announce(as *assigner.Assigner, name string, ips []netip.Addr, reason string) error {
	if u.beforeRound != nil {
		u.beforeRound(name)
	}
	up, err := uplink(name)
	if err != nil {
		return err
	}
	s := announce.NewSender(up)
	defer s.Close()
	var sent []netip.Addr
	err = as.WhileHeldOn(name, ips, func(held []netip.Addr) error {
		sent = held
		return s.Round(held)
	})
	if err != nil {
		return fmt.Errorf("re-announcing on %s: %w", name, err)
	}
	if len(sent) > 0 {
		u.recorder().Announced(name, reason)
		u.log().Info(map[string]string{ReasonPeriodic: "re-announced", ReasonDefend: "defended"}[reason], "uplink", name, "ips", sent)
	}
	return nil
}

// uplink looks up the interface by name as it is now: its index or MAC
// may have changed since the IP was first announced.
func uplink(name string) (announce.Uplink, error) { return announce.LookUplink(name) }

// Repair repairs, as `external-ip repair` does and under the state lock,
// each device whose report shows drift, nftables included, and logs the
// drift it fixed; a device without drift is not touched. A holder of
// DataDir whose state directory was lost is repaired too: with no record
// left, its addresses are held by nobody (the assigner logs what it
// releases).
func (u *Upkeep) Repair() error {
	devs, err := u.devices()
	if err != nil {
		return err
	}
	nat := steer.HostNAT()
	defer nat.Close()
	errs := []error{u.eachDevice(devs, nat, func(as *assigner.Assigner, rep *assigner.Report) error {
		if len(rep.Drift) == 0 {
			return nil
		}
		if u.beforeRepair != nil {
			u.beforeRepair(rep.Device)
		}
		return u.repair(as, rep.Device)
	})}
	held, err := host.Holders(u.DataDir)
	for _, dev := range held {
		if slices.Contains(devs, dev) {
			continue
		}
		as, done := u.assigner(dev, nat)
		if err := u.repair(as, dev); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dev, err))
		}
		done()
	}
	return errors.Join(append(errs, err)...)
}

// repair repairs one device and counts and logs the drift the repair
// itself found under its lock, not the report's that led to it: an ADD or
// a DEL between the two may have fixed some of that.
func (u *Upkeep) repair(as *assigner.Assigner, dev string) error {
	fixed, err := as.Repair()
	if err != nil {
		return fmt.Errorf("repairing: %w", err)
	}
	if len(fixed) == 0 {
		return nil
	}
	for _, d := range fixed {
		u.recorder().Repaired(report.Kind(d))
	}
	u.log().Info("repaired drift", "device", dev, "fixed", fixed)
	return nil
}
