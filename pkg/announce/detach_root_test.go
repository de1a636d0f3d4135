package announce

import (
	"net/netip"
	"os"
	"testing"
	"time"
)

func TestDetachedAnnouncerSendsTheLaterRoundsIntervalApart(t *testing.T) {
	l := newLink(t)
	fifo, done := doneFIFO(t)
	t.Setenv(envDone, fifo)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ips := []netip.Addr{wireIP4[0], wireIP6[0]}
	p := Plan{Uplink: l.uplink, IPs: ips, Rounds: 2, Interval: 400 * time.Millisecond}
	frames := l.capture(t)
	var detachTook time.Duration
	l.inNode(t, func() error {
		s := NewSender(l.uplink)
		defer s.Close()
		if err := s.Round(ips); err != nil {
			return err
		}
		start := time.Now()
		// Called in the node's namespace, which the child inherits.
		err := Detach(exe, p)
		detachTook = time.Since(start)
		return err
	})
	if detachTook >= p.Interval {
		t.Errorf("Detach took %s, as long as a round's interval (%s): it waits for the child", detachTook, p.Interval)
	}
	rounds := 1 + p.Rounds
	isRequest := func(b []byte) bool { return isARP(b) && len(b) >= 22 && b[21] == 1 }
	// Generous: collect returns once every frame is in, and a -race child on a
	// loaded 2-core machine can take seconds to start.
	got := collect(frames, func(b []byte) bool { return isRequest(b) || isNA(b) }, 2*rounds, 30*time.Second)
	var requests, nas []time.Time
	for _, f := range got {
		if isNA(f.Data) {
			nas = append(nas, f.At)
		} else {
			requests = append(requests, f.At)
		}
	}
	if len(requests) != rounds || len(nas) != rounds {
		t.Fatalf("received %d ARP requests and %d NAs, want %d of each: one per round", len(requests), len(nas), rounds)
	}
	for name, at := range map[string][]time.Time{"ARP request": requests, "NA": nas} {
		checkSpacing(t, name, at, p.Interval)
	}
	for _, r := range waitDone(t, done, 1, 5*time.Second) {
		if r != "ok" {
			t.Errorf("detached announcer failed: %s", r)
		}
	}
}

// checkSpacing wants arrivals interval apart. The first gap also holds the
// child's start-up, which can take seconds for a -race binary on a loaded
// machine; the later ones are sleeps alone. Arrival is stamped in user space,
// so a late read of one round can shorten the next gap a little.
func checkSpacing(t *testing.T, what string, at []time.Time, interval time.Duration) {
	t.Helper()
	const early = 100 * time.Millisecond
	for i := 1; i < len(at); i++ {
		gap := at[i].Sub(at[i-1])
		late := 300 * time.Millisecond
		if i == 1 {
			late = 15 * time.Second
		}
		if gap < interval-early || gap > interval+late {
			t.Errorf("%s of round %d came %s after round %d's, want %s (-%s, +%s)", what, i+1, gap, i, interval, early, late)
		}
	}
}
