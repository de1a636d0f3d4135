package standby

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/external-ip/external-ip/pkg/store"
)

// The check's defaults: one check per IP every DefaultEvery, and
// DefaultMisses unanswered in a row mean the active holder is gone. The
// active is then taken over between Misses x Every and (Misses+1) x Every
// after it died: 0.6 to 0.8 s, under the goal of 1 s from death to the
// client's first answer from the standby.
const (
	DefaultEvery  = 200 * time.Millisecond
	DefaultMisses = 3
)

// After a takeover the new active checks the node it took over from, which
// may still hold the IP on the other side of a partition: every period for
// formerFast, then every second until formerFor, then no more (a node
// back after that is found by the re-announcements).
const (
	formerFast = 10 * time.Second
	formerFor  = 5 * time.Minute
)

// Reasons of a takeover or a yield.
const (
	ReasonUnanswered = "unanswered" // the active missed Misses checks
	ReasonGoodbye    = "goodbye"    // the active said it gave the IP up
	ReasonRepair     = "repair"     // standby holders left beside active ones
	ReasonConflict   = "conflict"   // another node answers too, and wins
	ReasonUplinkDown = "uplink-down"
	// ReasonContainersGone: every container holding the IP here is gone
	// (its namespace with it) while the runtime's DEL has not come: the
	// IP is given up, with a goodbye, so that a standby takes it over at
	// once instead of the LAN reaching a node with nothing behind the IP.
	ReasonContainersGone = "containers-gone"
)

// Held is one IP of a network that stands by, as the node holds it: where
// it is announced, and whether attachments hold it here actively,
// in standby, or both (a moment's state the watch repairs).
type Held struct {
	IP      netip.Addr
	Uplink  string
	Device  string
	Active  bool
	Standby bool
	// Containers are the namespaces of the containers holding the IP
	// here, one per attachment (a zero one where its record names none,
	// which is never taken for gone).
	Containers []store.Netns
}

// Moves is what the watch asks of the node's state (stateMoves: the
// assigner's).
type Moves interface {
	// Read is every IP held here by a network that stands by.
	Read() ([]Held, error)
	// TakeOver holds h actively (every standby holder of it here becomes
	// an active one) and announces it.
	TakeOver(h Held) error
	// Yield holds h in standby (every active holder of it here).
	Yield(h Held) error
	// Announce sends a round for h, held actively here.
	Announce(h Held) error
	// Gone says whether every container holding h here is gone.
	Gone(h Held) bool
	// Goodbye tells the LAN that this node has just given h up, as a DEL
	// of its last holder does (announce.Goodbye).
	Goodbye(h Held) error
}

// Claims is where a claim names the IP's active node (Kubernetes): it is
// told of each takeover and yield this node makes, and decides between
// two nodes that both answer for an IP. The takeover does not wait for
// it: the LAN is the truth of who answers, and no API server is needed.
type Claims interface {
	TookOver(ip netip.Addr, reason string)
	Yielded(ip netip.Addr, reason string)
	// ActiveHere says whether the IP's claim names this node as the one
	// that answers for it; known is false when no claim names a node
	// that holds it. It must answer at once, from what the node already
	// knows: the watch asks it in its loop.
	ActiveHere(ip netip.Addr) (here, known bool)
}

// Recorder is told what the watch holds in standby and does; package
// metrics makes series of it.
type Recorder interface {
	// Standby is every IP held here in standby only, as of the last read.
	Standby(ips []netip.Addr)
	TookOver(reason string)
	Yielded(reason string)
}

// watched is one IP under watch.
type watched struct {
	Held
	// peer: standing by, the active holder's MAC, from its last answer;
	// active, the node taken over from, checked while it may still hold
	// the IP (since: when the takeover was).
	peer  net.HardwareAddr
	since time.Time
	// checked: a check went out at the last tick; heard: answered since.
	// answered: peer answered for the IP since this node stood by (not
	// only a contender this node yielded to, which may have yielded too).
	checked, heard, answered bool
	misses                   int
	// disputed: since when, and lastly when, another node kept answering
	// while the claim named this node (claimHolds).
	disputed, lastDispute time.Time
	// passedOver: this node took the IP over while the claim named another
	// node active, the node it had just found gone, whose MAC is goneMAC
	// (nil: none answered as the active). Until the claim's answer
	// changes, that name is the node found gone, not a node that wrote
	// since (claimMoved).
	passedOver bool
	goneMAC    net.HardwareAddr
}

// staleClaim is how long two nodes may both keep an IP each on a claim
// that names itself: then one view of the claim is stale (a node cut off
// from the API server as from the LAN, whose cache has not caught up),
// and both fall back to the MAC rule, which they compute alike from the
// LAN. VRRP decides by what is on the wire alone for the same reason.
const staleClaim = 3 * time.Second

// Watcher is the node's standby watch.
type Watcher struct {
	Every  time.Duration // 0: DefaultEvery
	Misses int           // 0: DefaultMisses
	// ReadEvery is how often the state is read again for new IPs; 0:
	// every 5 checks. A takeover or yield reads it at once.
	ReadEvery time.Duration
	Moves     Moves
	Ports     Ports
	Claims    Claims   // nil: none
	Recorder  Recorder // nil: none
	Log       *slog.Logger

	ips    map[netip.Addr]*watched
	ports  map[string]*port
	frames chan frameOn
	now    func() time.Time
	// defended is when an active IP was last announced against another
	// node that loses the tie (at most once a second).
	defended map[netip.Addr]time.Time
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.init()
	defer w.closePorts()
	every, readEvery := w.every(), w.ReadEvery
	if readEvery <= 0 {
		readEvery = 5 * every
	}
	tick, reread := time.NewTicker(every), time.NewTicker(readEvery)
	defer tick.Stop()
	defer reread.Stop()
	w.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-reread.C:
			w.refresh(ctx)
		case <-tick.C:
			if w.tick() {
				w.refresh(ctx)
			}
		case f := <-w.frames:
			if w.seen(f.uplink, read(f.data)) {
				w.refresh(ctx)
			}
		}
	}
}

func (w *Watcher) init() {
	w.ips, w.ports, w.defended = map[netip.Addr]*watched{}, map[string]*port{}, map[netip.Addr]time.Time{}
	w.frames = make(chan frameOn, 256)
	if w.now == nil {
		w.now = time.Now
	}
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
}

func (w *Watcher) every() time.Duration {
	if w.Every > 0 {
		return w.Every
	}
	return DefaultEvery
}

func (w *Watcher) misses() int {
	if w.Misses > 0 {
		return w.Misses
	}
	return DefaultMisses
}

// refresh reads what the node holds, keeping what the watch knew of each
// IP still there, and opens a port on exactly the uplinks of those IPs.
func (w *Watcher) refresh(ctx context.Context) {
	held, err := w.Moves.Read()
	if err != nil {
		w.Log.Error("reading the IPs that stand by failed", "error", err)
		return
	}
	next := map[netip.Addr]*watched{}
	var standby []netip.Addr
	for _, h := range held {
		x := w.ips[h.IP]
		if x == nil || x.Uplink != h.Uplink {
			x = &watched{}
			w.Log.Info("watching an IP of a network that stands by", "ip", h.IP, "uplink", h.Uplink, "active", h.Active)
		}
		x.Held = h
		next[h.IP] = x
		if !h.Active {
			standby = append(standby, h.IP)
		}
	}
	w.ips = next
	slices.SortFunc(standby, netip.Addr.Compare)
	if w.Recorder != nil {
		w.Recorder.Standby(standby)
	}
	w.follow(ctx)
}

// tick checks every IP once; true when a move changed the state.
func (w *Watcher) tick() bool {
	moved := false
	for _, x := range w.ips {
		up := w.Ports.Up(x.Uplink)
		switch {
		case x.Active && !up:
			moved = w.yield(x, ReasonUplinkDown) || moved
		case !up:
			// Cut off (keepalived's FAULT): its checks go nowhere and count
			// no miss, and the active is learnt anew once the uplink is back.
			x.misses, x.checked, x.heard, x.peer = 0, false, false, nil
		case x.Active && x.Standby:
			moved = w.takeOver(x, ReasonRepair) || moved
		case x.Active && w.Moves.Gone(x.Held):
			moved = w.giveUp(x) || moved
		case x.Active:
			w.claimMoved(x)
			w.checkFormer(x)
		case w.Moves.Gone(x.Held):
			x.misses, x.checked, x.heard = 0, false, false // nothing here to take the IP over for
		default:
			moved = w.checkActive(x) || moved
		}
	}
	return moved
}

// checkActive counts a miss when the last check went unanswered, takes
// the IP over after Misses in a row, and sends the next check: to the
// active's MAC, and broadcast as well once it has missed (the IP may have
// moved to another node meanwhile).
func (w *Watcher) checkActive(x *watched) bool {
	switch {
	case x.heard:
		x.misses = 0
	case x.checked:
		x.misses++
	}
	x.heard = false
	if x.misses >= w.misses() {
		return w.takeOver(x, ReasonUnanswered)
	}
	x.checked = w.send(x, x.peer)
	if x.peer != nil && x.misses > 0 {
		w.send(x, nil)
	}
	return false
}

// checkFormer asks the node taken over from whether it still holds the
// IP (a partition healed): fast at first, then once a second, then no
// more. It stops as soon as that node is heard checking as a standby.
func (w *Watcher) checkFormer(x *watched) {
	if x.peer == nil {
		return
	}
	age := w.now().Sub(x.since)
	switch {
	case age >= formerFor:
		x.peer = nil
	case age < formerFast || age%time.Second < w.every():
		w.send(x, x.peer)
	}
}

// seen acts on one frame heard on uplink; true when a move changed the
// state.
func (w *Watcher) seen(uplink string, h heard) bool {
	// A host asking from the IP uses it (RFC 5227 section 2.4: any ARP
	// with the IP as sender): the other holder resolving a neighbour.
	if h.kind == ask && w.seen(uplink, heard{kind: claim, ip: h.from, mac: h.mac}) {
		return true
	}
	x := w.ips[h.ip]
	if h.kind == none || x == nil || x.Uplink != uplink || w.ours(h.mac) {
		return false
	}
	switch {
	case !x.Active && h.kind == claim:
		x.heard, x.answered, x.peer = true, true, h.mac
	case !x.Active && h.kind == goodbye && sameMAC(h.mac, x.peer):
		return w.takeOver(x, ReasonGoodbye)
	case x.Active && h.kind == ask && sameMAC(h.mac, x.peer):
		x.peer = nil // the node taken over from stands by: it checks on us
	case x.Active && h.kind == claim:
		return w.conflict(x, h.mac)
	}
	return false
}

// conflict settles two nodes holding one IP actively: the one the IP's
// claim names keeps it, or without such a claim the one whose uplink MAC
// is the higher; the other yields. Both decide alike from what they both
// see, so there is no flapping. The one that keeps it announces, at most
// once a second, so that the other hears it even where it does not check
// on us.
func (w *Watcher) conflict(x *watched, theirs net.HardwareAddr) bool {
	yields, because := w.loses(x, theirs)
	if yields {
		w.Log.Info("another node answers for an IP this node holds actively; this node yields", "ip", x.IP, "theirs", theirs.String(), "because", because)
		moved := w.yield(x, ReasonConflict)
		x.peer, x.heard = theirs, true
		return moved
	}
	if last, ok := w.defended[x.IP]; !ok || w.now().Sub(last) >= time.Second {
		w.defended[x.IP] = w.now()
		w.Log.Warn("another node answers for an IP this node holds actively; the other yields", "ip", x.IP, "theirs", theirs.String(), "because", because)
		if err := w.Moves.Announce(x.Held); err != nil {
			w.Log.Error("announcing against the other node failed", "ip", x.IP, "error", err)
		}
	}
	return false
}

// loses says whether this node gives x up to the node whose MAC is
// theirs, and why. A claim that names a node is the cluster's record of
// who took the IP over last, which both nodes read; the MAC rule is for
// IPs with no such claim (no Kubernetes, no pools, or the API server out
// of reach when the claim was to be written), and for a claim that still
// names the node this one took the IP over from, against another node
// (passedOver): two standbys that took over at once from a dead active
// whose pod object outlives it would otherwise both yield to it, again
// and again. As in VRRP, two live nodes that hear each other decide by
// what both see, and a name for a node neither hears is not that.
func (w *Watcher) loses(x *watched, theirs net.HardwareAddr) (bool, string) {
	why := ""
	if w.Claims != nil {
		if here, known := w.Claims.ActiveHere(x.IP); known {
			switch {
			case !here && x.passedOver && !sameMAC(theirs, x.goneMAC):
				why = "the claim names the node this node took over from, not the one heard; "
			case !here:
				return true, "the claim names another node active"
			case w.claimHolds(x):
				return false, "the claim names this node active"
			}
		}
	}
	if p := w.ports[x.Uplink]; p != nil && lower(p.from.MAC, theirs) {
		return true, why + "this node's MAC is the lower"
	}
	return false, why + "this node's MAC is not the lower"
}

// claimHolds says whether a claim naming this node still decides a
// dispute over x: for staleClaim from its start (a dispute ends when no
// other node is heard for twice that).
func (w *Watcher) claimHolds(x *watched) bool {
	now := w.now()
	if x.lastDispute.IsZero() || now.Sub(x.lastDispute) > 2*staleClaim {
		x.disputed = now
	}
	x.lastDispute = now
	return now.Sub(x.disputed) < staleClaim
}

// claimMoved forgets, once the claim no longer names another node, that
// it named the node taken over from: another node named later is one
// that wrote since, as the claim's record of the last takeover.
func (w *Watcher) claimMoved(x *watched) {
	if x.passedOver {
		here, known := w.Claims.ActiveHere(x.IP)
		x.passedOver = known && !here
	}
}

// passOver notes, at a takeover, whether the claim names another node:
// then it names the node this one has just found gone (its checks
// unanswered, or its goodbye), known by its MAC if it answered as the
// active while this node stood by. A repair found no node gone.
func (w *Watcher) passOver(x *watched, reason string) {
	x.passedOver, x.goneMAC = false, nil
	if x.answered {
		x.goneMAC = slices.Clone(x.peer)
	}
	if w.Claims != nil && reason != ReasonRepair {
		here, known := w.Claims.ActiveHere(x.IP)
		x.passedOver = known && !here
	}
}

func (w *Watcher) takeOver(x *watched, reason string) bool {
	if err := w.Moves.TakeOver(x.Held); err != nil {
		w.Log.Error("taking over failed", "ip", x.IP, "reason", reason, "error", err)
		return false
	}
	w.passOver(x, reason)
	w.Log.Info("took over", "ip", x.IP, "uplink", x.Uplink, "reason", reason, "from", x.peer.String())
	x.Active, x.Standby, x.since, x.misses, x.checked = true, false, w.now(), 0, false
	if reason == ReasonGoodbye {
		x.peer = nil // it released the IP: there is nothing to check on it
	}
	if w.Recorder != nil && reason != ReasonRepair {
		w.Recorder.TookOver(reason)
	}
	if w.Claims != nil {
		w.Claims.TookOver(x.IP, reason)
	}
	return true
}

func (w *Watcher) yield(x *watched, reason string) bool {
	if err := w.Moves.Yield(x.Held); err != nil {
		w.Log.Error("yielding failed", "ip", x.IP, "reason", reason, "error", err)
		return false
	}
	w.Log.Info("yielded: now in standby", "ip", x.IP, "uplink", x.Uplink, "reason", reason)
	if w.Recorder != nil {
		w.Recorder.Yielded(reason)
	}
	x.Active, x.Standby, x.peer, x.misses, x.checked, x.heard, x.answered = false, true, nil, 0, false, false, false
	if w.Claims != nil {
		w.Claims.Yielded(x.IP, reason)
	}
	return true
}

// giveUp yields x, whose containers are gone, and says goodbye so that a
// standby node takes it over at once.
func (w *Watcher) giveUp(x *watched) bool {
	if !w.yield(x, ReasonContainersGone) {
		return false
	}
	if err := w.Moves.Goodbye(x.Held); err != nil {
		w.Log.Warn("goodbye not sent; a standby takes over when its checks go unanswered", "ip", x.IP, "error", err)
	}
	return true
}

// send sends x's check to mac (nil: broadcast); false if it could not.
func (w *Watcher) send(x *watched, mac net.HardwareAddr) bool {
	p := w.ports[x.Uplink]
	if p == nil {
		return false
	}
	f, err := check(p.from, x.IP, mac)
	if err == nil {
		err = p.conn.WriteFrame(f)
	}
	if err != nil {
		w.Log.Debug("check not sent", "ip", x.IP, "uplink", x.Uplink, "error", err)
		return false
	}
	return true
}
