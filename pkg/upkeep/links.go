package upkeep

import (
	"context"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkEvent is one of the node's link messages: an interface's index and
// name, whether it is administratively up (IFF_UP), and Gone when it was
// deleted.
type LinkEvent struct {
	Index int
	Name  string
	Up    bool
	Gone  bool
}

// LinkFunc delivers the node's link events until ctx ends, those of the
// links that exist first; the channel closes when the subscription ends.
type LinkFunc func(ctx context.Context) (<-chan LinkEvent, error)

// subscribeLinks is the node's LinkFunc: RTNLGRP_LINK over netlink, the
// existing links listed first.
func subscribeLinks(ctx context.Context) (<-chan LinkEvent, error) {
	return subscribeLinksWith(ctx, netlink.LinkSubscribeOptions{ListExisting: true})
}

// subscribeLinksWith subscribes with opts. The library closes the socket
// only when done is closed, not when its reader stops (a receive buffer
// overrun): done is closed then too, or each new subscription after an
// overrun would leave a socket behind, still filling with every link
// message of the node.
func subscribeLinksWith(ctx context.Context, opts netlink.LinkSubscribeOptions) (<-chan LinkEvent, error) {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(done) })
	err := netlink.LinkSubscribeWithOptions(updates, done, opts)
	if err != nil {
		if stop() {
			close(done)
		}
		return nil, err
	}
	out := make(chan LinkEvent, 64)
	go func() {
		defer close(out)
		defer func() {
			if stop() {
				close(done)
			}
			for range updates { // the library's reader ends once its socket is closed
			}
		}()
		for u := range updates {
			ev := LinkEvent{Index: int(u.Index), Up: u.Flags&unix.IFF_UP != 0, Gone: u.Header.Type == unix.RTM_DELLINK}
			if u.Link != nil {
				ev.Name = u.Link.Attrs().Name
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// bounces tells, from the link events, when an uplink of a held IP comes
// up again. Taking an interface down flushes the proxy neighbour entries
// on it, of both families (neigh_ifdown, from the NETDEV_DOWN notifier of
// ARP and of neighbour discovery), and coming up does not bring them
// back: the LAN loses every IP held as a route on that uplink until a
// repair puts them back. A carrier loss alone flushes none.
type bounces struct {
	up map[int]bool // each link's last IFF_UP, from the events
	mu sync.Mutex
	// held are the uplinks of the held IPs, as the last read of the
	// state found them (the conflict watch's).
	held map[string]bool
}

func newBounces() *bounces { return &bounces{up: map[int]bool{}} }

// setHeld replaces the uplinks of the held IPs.
func (b *bounces) setHeld(uplinks map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = uplinks
}

// cameUp takes one event: true when it is an uplink of a held IP that was
// down and is up now.
func (b *bounces) cameUp(ev LinkEvent) bool {
	was, known := b.up[ev.Index]
	if ev.Gone {
		delete(b.up, ev.Index)
		return false
	}
	b.up[ev.Index] = ev.Up
	b.mu.Lock()
	defer b.mu.Unlock()
	return ev.Up && known && !was && b.held[ev.Name]
}

// relinkAfter is how long the link watch waits before it subscribes
// again after its subscription ended (a socket overrun on a node busy
// with links); its first events then trigger a repair, since a bounce
// may have gone unseen.
const relinkAfter = time.Second

// follow reads the link events and signals on out, for Run's repair, each
// uplink of a held IP that came up again; it subscribes again when a
// subscription ends, until ctx ends. A signal already waiting stands for
// the next: one repair covers every uplink.
func (b *bounces) follow(ctx context.Context, links LinkFunc, out chan<- string, logErr func(string, error)) {
	for first := true; ; first = false {
		events, err := links(ctx)
		switch {
		case err != nil:
			logErr("subscribing to link events", err)
		case !first:
			signal(out, "(link events resumed)")
		}
		if err == nil {
			for ev := range events {
				if b.cameUp(ev) {
					signal(out, ev.Name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(relinkAfter):
		}
	}
}

func signal(out chan<- string, name string) {
	select {
	case out <- name:
	default:
	}
}
