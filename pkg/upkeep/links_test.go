package upkeep

import (
	"context"
	"testing"
	"time"
)

// Only an uplink of a held IP coming back up is a bounce: taking it down
// flushed its proxy entries. A pod's veth coming up, a carrier change on
// an uplink that stays up, and the links listed first are not.
func TestOnlyAnUplinkOfAHeldIPComingBackUpIsABounce(t *testing.T) {
	b := newBounces()
	b.setHeld(map[string]bool{"up0": true})
	for i, tc := range []struct {
		ev   LinkEvent
		want bool
		why  string
	}{
		{LinkEvent{Index: 2, Name: "up0", Up: true}, false, "listed first, already up"},
		{LinkEvent{Index: 9, Name: "veth9", Up: false}, false, "a pod's veth made down"},
		{LinkEvent{Index: 2, Name: "up0", Up: true}, false, "a carrier change while up"},
		{LinkEvent{Index: 2, Name: "up0", Up: false}, false, "the uplink taken down"},
		{LinkEvent{Index: 2, Name: "up0", Up: true}, true, "the uplink up again"},
		{LinkEvent{Index: 9, Name: "veth9", Up: true}, false, "the pod's veth up: no held IP's uplink"},
		{LinkEvent{Index: 3, Name: "up1", Up: false}, false, "another uplink, down"},
		{LinkEvent{Index: 3, Name: "up1", Up: true}, false, "another uplink, up, holding nothing"},
		{LinkEvent{Index: 2, Name: "up0", Gone: true}, false, "the uplink deleted"},
		{LinkEvent{Index: 2, Name: "up0", Up: true}, false, "a new link of its name: first seen up"},
	} {
		if got := b.cameUp(tc.ev); got != tc.want {
			t.Errorf("event %d (%s): a bounce %v, want %v", i, tc.why, got, tc.want)
		}
	}
}

// The link watch signals each bounce, subscribes again when its
// subscription ends, and then signals once, since a bounce may have gone
// unseen meanwhile.
func TestTheLinkWatchSignalsABounceAndResubscribesAfterItsSubscriptionEnds(t *testing.T) {
	subs := make(chan chan LinkEvent, 2)
	links := func(context.Context) (<-chan LinkEvent, error) {
		c := make(chan LinkEvent, 8)
		subs <- c
		return c, nil
	}
	b := newBounces()
	b.setHeld(map[string]bool{"up0": true})
	out := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.follow(ctx, links, out, func(string, error) {})
	first := <-subs
	first <- LinkEvent{Index: 2, Name: "up0", Up: false}
	first <- LinkEvent{Index: 2, Name: "up0", Up: true}
	if got := wait(t, out); got != "up0" {
		t.Fatalf("the bounce signalled %q, want up0", got)
	}
	close(first) // an overrun ends the subscription
	second := <-subs
	if got := wait(t, out); got != "(link events resumed)" {
		t.Errorf("after subscribing again: %q, want a signal for the events it may have missed", got)
	}
	second <- LinkEvent{Index: 2, Name: "up0", Up: true}
	select {
	case got := <-out:
		t.Errorf("the relisted uplink, up, signalled %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func wait(t *testing.T, out <-chan string) string {
	t.Helper()
	select {
	case s := <-out:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no signal within 5s")
		return ""
	}
}
