package upkeep

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/test/logbuf"
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
	l.stop() // not w.close, which waits for the readers itself: a reader that never stops would hang the test
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the readers did not stop when the uplink's sockets were closed")
	}
}

// claimants is how many MACs the bound is tested with: the goal is a node
// process whose memory stays bounded under 10,000 claiming MACs.
const claimants = 10000

// A host claiming a held IP from rotating MACs, through the sockets the
// watch opens: one episode, one series, a bounded log and a bounded
// memory of MACs, however many MACs it uses. Each MAC used to begin an
// episode of its own: a series, a log line and a map entry per MAC,
// kept for five minutes after the last claim.
func TestThousandsOfMACsClaimingAHeldIPKeepOneEpisodeAndABoundedLog(t *testing.T) {
	frames := make([][]byte, claimants)
	for i := range frames {
		mac := net.HardwareAddr{0x02, 0x66, 0, byte(i >> 16), byte(i >> 8), byte(i)}
		grat, err := announce.GratuitousARP(mac, held4)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = grat[i%2]
	}
	rec, logs, conn := newFakeRecorder(), &logbuf.Buffer{}, newFakeConn(frames...)
	u := &Upkeep{Recorder: rec, Log: logs.Logger(), Listen: func(announce.Uplink) ([]FrameConn, error) {
		return []FrameConn{conn}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := u.newWatch(ctx)
	defer w.close()
	var defends int
	w.c.defend = func(HeldIP) { defends++ }
	t0 := time.Unix(1e9, 0)
	w.c.setHeld([]HeldIP{{IP: held4, Uplink: "up0", Device: "eip0", Holders: 1}},
		map[string]net.HardwareAddr{"up0": nodeMAC}, []net.HardwareAddr{nodeMAC}, t0)
	w.listen("up0", announce.Uplink{Name: "up0", Index: 7, MAC: nodeMAC})
	for i := range claimants {
		select {
		case f := <-w.frames:
			w.c.seen(f.uplink, f.data, t0.Add(time.Duration(i)*time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d of %d did not arrive", i, claimants)
		}
	}
	if len(w.c.episodes) != 1 {
		t.Fatalf("%d claiming MACs kept %d episodes; want one, of %s", claimants, len(w.c.episodes), held4)
	}
	if e := w.c.episodes[held4]; len(e.named) != namedPerEpisode {
		t.Errorf("%s's episode names %d MACs, want %d", held4, len(e.named), namedPerEpisode)
	}
	if want := held4.String() + " 02:66:00:00:00:00"; len(rec.began) != 1 || rec.began[0] != want {
		t.Errorf("%d claiming MACs began %d series (first %v); want one, [%s]", claimants, len(rec.began), rec.began[:min(3, len(rec.began))], want)
	}
	lines := strings.Count(logs.String(), "\n")
	if lines != namedPerEpisode+1 || !strings.Contains(logs.String(), "the next are not logged") {
		t.Errorf("%d claiming MACs logged %d lines; want %d (one per MAC named, one saying more claim it)", claimants, lines, namedPerEpisode+1)
	}
	if defends != 1 { // the claims span 10 s less a millisecond: one DEFEND_INTERVAL
		t.Errorf("%d claims over 10 s defended %d times, want once", claimants, defends)
	}
}
