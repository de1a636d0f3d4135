package upkeep

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
)

// watch listens on every uplink that holds an IP and hands what it hears
// to conflicts; refresh follows the state.
type watch struct {
	u       *Upkeep
	ctx     context.Context
	c       *conflicts
	frames  chan frame
	uplinks map[string]*listening
	// bounces, when the link watch runs, is told the held IPs' uplinks.
	bounces *bounces
	// last is what the last refresh found held, kept for a device whose
	// state cannot be read now (a lock timeout is no release).
	last []HeldIP
}

// listening is one uplink's sockets, for the interface index they were
// opened on; done closes when every reader has stopped.
type listening struct {
	index int
	conns []FrameConn
	done  chan struct{}
}

func (u *Upkeep) newWatch(ctx context.Context) *watch {
	w := &watch{u: u, ctx: ctx, frames: make(chan frame, 64), uplinks: map[string]*listening{}}
	w.c = newConflicts(u.log(), u.recorder(), u.defend)
	return w
}

// refresh reads what the node holds, records it, and listens on exactly the
// uplinks that hold something.
func (w *watch) refresh() error {
	held, failed, err := w.u.held()
	if err != nil && failed == nil {
		return err // no device listed: the series stay as they were
	}
	for _, h := range w.last {
		if failed[h.Device] {
			held = append(held, h) // one device unread holds up none of the others
		}
	}
	w.last = held
	w.u.recorder().Held(held)
	ups := map[string]announce.Uplink{}
	macs := map[string]net.HardwareAddr{}
	for _, h := range held {
		if up, err := uplink(h.Uplink); h.Uplink != "" && err == nil {
			ups[h.Uplink], macs[h.Uplink] = up, up.MAC
		}
	}
	w.c.setHeld(held, macs, nodeMACs(), w.u.now())
	if w.bounces != nil {
		names := map[string]bool{}
		for _, h := range held {
			names[h.Uplink] = h.Uplink != ""
		}
		w.bounces.setHeld(names)
	}
	for name, l := range w.uplinks {
		if up, ok := ups[name]; !ok || up.Index != l.index || isDone(l.done) {
			l.stop()
			delete(w.uplinks, name)
		}
	}
	for name, up := range ups {
		if w.uplinks[name] == nil {
			w.listen(name, up)
		}
	}
	return err
}

func (w *watch) listen(name string, up announce.Uplink) {
	conns, err := w.u.listen()(up)
	if err != nil {
		w.u.log().Error("listening for conflicts failed", "uplink", name, "error", err)
		return
	}
	l := &listening{index: up.Index, conns: conns, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { readFrames(w.ctx, c, name, w.frames) })
	}
	go func() { wg.Wait(); close(l.done) }()
	w.uplinks[name] = l
}

func (l *listening) stop() { closeAll(l.conns) }

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (w *watch) close() {
	for _, l := range w.uplinks {
		l.stop()
		<-l.done
	}
}

// nodeMACs are the MACs of every interface of the node: a frame from any
// of them is the node's own, not a claim.
func nodeMACs() []net.HardwareAddr {
	ifs, _ := net.Interfaces()
	var out []net.HardwareAddr
	for _, i := range ifs {
		if len(i.HardwareAddr) > 0 {
			out = append(out, i.HardwareAddr)
		}
	}
	return out
}

// Held reads every IP the node holds from the state, as Reannounce does.
func (u *Upkeep) Held() ([]HeldIP, error) {
	held, _, err := u.held()
	return held, err
}

// held is Held with the devices whose state could not be read (nil when
// none could be listed).
func (u *Upkeep) held() ([]HeldIP, map[string]bool, error) {
	devs, err := u.devices()
	if err != nil {
		return nil, nil, err
	}
	var held []HeldIP
	failed := map[string]bool{}
	var errs []error
	for _, dev := range devs {
		err := u.eachDevice([]string{dev}, nil, func(_ *assigner.Assigner, rep *assigner.Report) error {
			for _, ip := range rep.IPs {
				if len(ip.Holders) > 0 {
					held = append(held, HeldIP{IP: ip.Addr, Uplink: ip.Uplink, Device: rep.Device, Holders: len(ip.Holders)})
				}
			}
			return nil
		})
		if err != nil {
			failed[dev], errs = true, append(errs, err)
		}
	}
	return held, failed, errors.Join(errs...)
}

// defend sends one round for h on its uplink (RFC 5227 section 2.4 (b));
// conflicts decides when.
func (u *Upkeep) defend(h HeldIP) {
	as, done := u.assigner(h.Device, nil)
	defer done()
	u.logErr("defending "+h.IP.String(), u.announce(as, h.Uplink, []netip.Addr{h.IP}, ReasonDefend))
}

func (u *Upkeep) now() time.Time {
	if u.clock != nil {
		return u.clock()
	}
	return time.Now()
}

func (u *Upkeep) listen() ListenFunc {
	if u.Listen != nil {
		return u.Listen
	}
	return listenRaw
}

func (u *Upkeep) recorder() Recorder {
	if u.Recorder == nil {
		return nopRecorder{}
	}
	return u.Recorder
}
