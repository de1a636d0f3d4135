package upkeep

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
)

// fakeConn hands out its frames, then blocks until closed, as a socket does.
type fakeConn struct {
	frames chan []byte
	closed chan struct{}
}

func newFakeConn(frames ...[]byte) *fakeConn {
	c := &fakeConn{frames: make(chan []byte, len(frames)), closed: make(chan struct{})}
	for _, f := range frames {
		c.frames <- f
	}
	return c
}

func (c *fakeConn) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-c.frames:
		return copy(b, f), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *fakeConn) Close() error { close(c.closed); return nil }

// What an uplink's sockets receive reaches the conflict logic tagged with
// the uplink, and stopping the uplink stops its readers.
func TestTheWatchHandsEachUplinksFramesOnAndStopsItsReaders(t *testing.T) {
	grat, _ := announce.GratuitousARP(rogueMAC, held4)
	conns := []*fakeConn{newFakeConn(grat[0]), newFakeConn(grat[1])}
	var opened announce.Uplink
	u := &Upkeep{Listen: func(up announce.Uplink) ([]FrameConn, error) {
		opened = up
		return []FrameConn{conns[0], conns[1]}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := u.newWatch(ctx)
	w.listen("up0", announce.Uplink{Name: "up0", Index: 7, MAC: nodeMAC})
	if opened.Name != "up0" || opened.Index != 7 {
		t.Fatalf("the sockets were opened for %+v, want up0 (index 7)", opened)
	}
	got := map[string]bool{}
	for range 2 {
		select {
		case f := <-w.frames:
			if f.uplink != "up0" {
				t.Errorf("a frame of up0 arrived as %q's", f.uplink)
			}
			got[string(f.data)] = true
		case <-time.After(5 * time.Second):
			t.Fatal("the frames the sockets received did not arrive")
		}
	}
	if !got[string(grat[0])] || !got[string(grat[1])] {
		t.Errorf("frames arrived changed: %d distinct", len(got))
	}
	l := w.uplinks["up0"]
	w.close()
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the readers did not stop when the uplink's sockets were closed")
	}
}
