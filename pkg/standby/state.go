package standby

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// StateMoves is the node's Moves: the plugin's state under DataDir, read
// under its lock as `external-ip status` reads it, and changed only by
// the assigner, an ADD of each record that moves (assigner.Options.Move).
type StateMoves struct {
	DataDir     string
	LockTimeout time.Duration
	// UplinkRouting is the plugin entry's, with which a takeover routes
	// as the plugin's ADD would.
	UplinkRouting config.UplinkRouting
	// Rounds and Interval are the announcement rounds of a takeover; 0:
	// 3 rounds 1.1 s apart, as the plugin's default.
	Rounds   int
	Interval time.Duration
	Log      *slog.Logger

	// mu guards DataDir and UplinkRouting (Use), and what Read keeps;
	// the moves hold it too, one at a time.
	mu     sync.Mutex
	seen   map[string]time.Time // each state directory's last change read
	readAt time.Time            // when seen was taken
	cached []Held
}

// coarse bounds the granularity of a directory's modification time: the
// kernel stamps it from a clock that moves a tick at a time (up to 10 ms
// at HZ=100), so a change in the same tick as a read leaves the stamp the
// read saw. A stamp that close to its read proves nothing (git's "racy
// clean" rule): the next read reads the records again.
const coarse = 50 * time.Millisecond

// unchanged says whether stamps, taken now, show no change since the last
// read of the records.
func (s *StateMoves) unchanged(stamps map[string]time.Time) bool {
	if s.seen == nil || !maps.EqualFunc(stamps, s.seen, time.Time.Equal) {
		return false
	}
	for _, t := range s.seen {
		if !t.Before(s.readAt.Add(-coarse)) {
			return false
		}
	}
	return true
}

var _ Moves = (*StateMoves)(nil)

// Use makes the moves work on dataDir and routing from the next read on:
// the plugin entry was reloaded. It is safe beside the watch.
func (s *StateMoves) Use(dataDir string, routing config.UplinkRouting) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.DataDir, s.UplinkRouting, s.seen = dataDir, routing, nil
}

// Read is every IP a network that stands by holds on the node. It reads
// the records again only when a state directory changed since (every
// change renames a file into att/ or ip/), so that a node where nothing
// stands by pays a few stat calls a second.
func (s *StateMoves) Read() ([]Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devs, err := store.Devices(s.DataDir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	stamps := s.stamps(devs)
	if s.unchanged(stamps) {
		return s.cached, nil
	}
	var out []Held
	var errs []error
	for _, dev := range devs {
		held, err := s.readDevice(dev)
		out, errs = append(out, held...), append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.seen, s.readAt, s.cached = stamps, now, out
	return out, nil
}

// stamps are the modification times of each device's att/ and ip/.
func (s *StateMoves) stamps(devs []string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, dev := range devs {
		for _, sub := range []string{"att", "ip"} {
			p := filepath.Join(store.New(s.DataDir, dev).Dir(), sub)
			if fi, err := os.Stat(p); err == nil {
				out[p] = fi.ModTime()
			}
		}
	}
	return out
}

// readDevice is dev's IPs of networks that stand by.
func (s *StateMoves) readDevice(dev string) ([]Held, error) {
	recs, entries, err := s.read(dev, func(r *store.Record) bool { return r.Standby })
	if err != nil {
		return nil, err
	}
	held := map[netip.Addr]*Held{}
	at := func(ip netip.Addr) *Held {
		if held[ip] == nil {
			held[ip] = &Held{IP: ip, Device: dev, Uplink: entries[ip].Uplink}
		}
		return held[ip]
	}
	for _, r := range recs {
		for _, ip := range r.IPs {
			at(ip).Active = true
		}
		for _, ip := range r.StandbyIPs {
			at(ip).Standby = true
		}
		for _, ip := range r.Held() {
			at(ip).Containers = append(at(ip).Containers, containerOf(r))
		}
	}
	out := make([]Held, 0, len(held))
	for _, h := range held {
		if h.Uplink != "" {
			out = append(out, *h)
		}
	}
	return out, nil
}

// read is dev's records that keep accepts, and the index entries of their
// IPs, under the state lock.
func (s *StateMoves) read(dev string, keep func(*store.Record) bool) (map[string]*store.Record, map[netip.Addr]store.IPEntry, error) {
	st := store.New(s.DataDir, dev)
	l, err := st.Lock(store.ReadOnly, s.LockTimeout)
	if err != nil || l == nil {
		return nil, nil, err
	}
	defer l.Unlock()
	recs, err := st.Records()
	if err != nil {
		return nil, nil, err
	}
	entries := map[netip.Addr]store.IPEntry{}
	for key, r := range recs {
		if !keep(r) {
			delete(recs, key)
			continue
		}
		for _, ip := range r.Held() {
			if entries[ip], err = st.ReadIP(ip); err != nil {
				return nil, nil, err
			}
		}
	}
	return recs, entries, nil
}

// TakeOver moves every standby holder of h.IP on its device to active,
// then announces h. A failed announcement is no failed takeover: the IP
// is held actively, its later rounds and the re-announcements follow.
func (s *StateMoves) TakeOver(h Held) error {
	err := s.move(h, false, func(r *store.Record) bool { return slices.Contains(r.StandbyIPs, h.IP) },
		func(r *store.Record) []netip.Addr {
			return slices.DeleteFunc(slices.Clone(r.StandbyIPs), func(ip netip.Addr) bool { return ip == h.IP })
		})
	if err != nil {
		return err
	}
	if err := s.Announce(h); err != nil {
		s.log().Warn("the first round of a takeover failed", "ip", h.IP, "error", err)
	}
	return nil
}

// Yield moves every active holder of h.IP whose network stands by to
// standby, also while its uplink is down.
func (s *StateMoves) Yield(h Held) error {
	return s.move(h, true, func(r *store.Record) bool { return r.Standby && slices.Contains(r.IPs, h.IP) },
		func(r *store.Record) []netip.Addr { return append(slices.Clone(r.StandbyIPs), h.IP) })
}

// move re-ADDs each record of h.Device that which picks, with the IPs
// inStandby says in standby, as the plugin's ADD of it made it otherwise;
// downOK lets it work with the uplink down (a yield).
func (s *StateMoves) move(h Held, downOK bool, which func(*store.Record) bool, inStandby func(*store.Record) []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, _, err := s.read(h.Device, which)
	if err != nil {
		return err
	}
	nat := steer.HostNAT()
	defer nat.Close()
	r := s.UplinkRouting
	if r.Route.Mask == 0 {
		r.Route = slots.Default()
	}
	routing := uplinkroute.NewHostRouting(nat, r.Route, r.Gateways, r.Off)
	defer routing.Close()
	var errs []error
	for _, rec := range recs {
		o := assigner.Options{Device: h.Device, DataDir: s.DataDir, LockTimeout: s.LockTimeout, Log: s.log(),
			NAT: nat, Routing: routing, Traffic: traffic.None, RouteProtocol: int(rec.Route),
			Standby: true, Move: true, InStandby: inStandby(rec), UplinkDownOK: downOK}
		if rec.Steering != nil {
			o.Traffic, o.Container = traffic.Mode(rec.Steering.Traffic), rec.Steering.Container
		}
		as := assigner.New(o)
		if _, err := as.Add(rec.Attachment, rec.Held(), nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rec.Attachment, err))
		}
		as.Close()
	}
	return errors.Join(errs...)
}

// Announce sends h's first round now and the others later, each under
// the state lock for as long as h is held actively on its uplink (a DEL
// meanwhile stops them, as for the plugin's own rounds).
func (s *StateMoves) Announce(h Held) error {
	rounds, interval := s.Rounds, s.Interval
	if rounds <= 0 {
		rounds, interval = 3, 1100*time.Millisecond
	}
	if err := s.round(h); err != nil {
		return err
	}
	for i := 1; i < rounds; i++ {
		time.AfterFunc(time.Duration(i)*interval, func() {
			if err := s.round(h); err != nil {
				s.log().Warn("a later round of a takeover failed", "ip", h.IP, "error", err)
			}
		})
	}
	return nil
}

func (s *StateMoves) round(h Held) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	up, err := announce.LookUplink(h.Uplink)
	if err != nil {
		return err
	}
	snd := announce.NewSender(up)
	defer snd.Close()
	as := assigner.New(assigner.Options{Device: h.Device, DataDir: s.DataDir, LockTimeout: s.LockTimeout, Log: s.log()})
	defer as.Close()
	return as.WhileHeldOn(h.Uplink, []netip.Addr{h.IP}, snd.Round)
}

// Gone says whether every container holding h here is gone. A record
// that names no namespace, and one this process cannot judge, count as
// alive: an IP is never given up on a doubt.
func (s *StateMoves) Gone(h Held) bool {
	if len(h.Containers) == 0 {
		return false
	}
	for _, ns := range h.Containers {
		if !NetnsGone(ns) {
			return false
		}
	}
	return true
}

// NetnsGone judges ns only where this process sees the very directory the
// ADD saw (a node process in a container without the host's netns
// directory sees none, or another): gone when its path is no more there,
// or leads to another namespace. A file there that is no namespace is a
// bind mount this process does not see (one made after its container
// started, without mount propagation): not gone.
func NetnsGone(ns store.Netns) bool {
	var dir, st unix.Stat_t
	if ns.Path == "" || unix.Stat(filepath.Dir(ns.Path), &dir) != nil || dir.Dev != ns.DirDev || dir.Ino != ns.DirIno {
		return false
	}
	switch err := unix.Stat(ns.Path, &st); {
	case errors.Is(err, unix.ENOENT):
		return true
	case err != nil:
		return false
	}
	var fs unix.Statfs_t
	return unix.Statfs(ns.Path, &fs) == nil && fs.Type == unix.NSFS_MAGIC && (st.Dev != ns.Dev || st.Ino != ns.Ino)
}

// containerOf is r's container namespace, zero when r names none.
func containerOf(r *store.Record) store.Netns {
	if r.Netns == nil {
		return store.Netns{}
	}
	return *r.Netns
}

// Goodbye says goodbye for h on its uplink, as a DEL of its last holder
// would.
func (s *StateMoves) Goodbye(h Held) error {
	up, err := announce.LookUplink(h.Uplink)
	if err != nil {
		return err
	}
	return announce.Goodbye(announce.Target{Addr: h.IP, Uplink: up}, nil)
}

func (s *StateMoves) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}
