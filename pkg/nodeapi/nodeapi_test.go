package nodeapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
	"github.com/external-ip/external-ip/pkg/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve serves h, which has nothing to do after its answer.
func serve(t *testing.T, h func(context.Context, Request) Response) Client {
	t.Helper()
	return serveAfter(t, func(ctx context.Context, req Request) (Response, func()) { return h(ctx, req), nil })
}

func serveAfter(t *testing.T, h Handler) Client {
	t.Helper()
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, l, h, quiet); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	st, err := os.Stat(SocketPath(dir))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v; want mode 0600", st, err)
	}
	return Client{Socket: SocketPath(dir), Timeout: 5 * time.Second}
}

func TestAClaimRoundTripsAndEachAnswerHasItsKind(t *testing.T) {
	att := store.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
	c := serve(t, func(_ context.Context, req Request) Response {
		switch req.Pool {
		case "ok":
			return Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Hold: "route"}
		case "full":
			return Response{Reason: ReasonPoolExhausted, Message: "pool full: no free IP"}
		case "down":
			return Response{Unavailable: "the API server did not answer"}
		}
		return Response{Reason: ReasonUnknownPool, Message: "external-ip/pool: no pool named " + req.Pool}
	})
	resp, err := c.Do(Request{Op: OpClaim, Attachment: att, Pool: "ok"})
	if err != nil || resp.Err() != nil || len(resp.Addresses) != 1 || resp.Hold != "route" {
		t.Fatalf("claim: %+v %v", resp, err)
	}
	for pool, kind := range map[string]error{"full": ErrExhausted, "down": ErrUnavailable, "nope": ErrRefused} {
		resp, err := c.Do(Request{Op: OpClaim, Attachment: att, Pool: pool})
		if err != nil || !errors.Is(resp.Err(), kind) {
			t.Errorf("pool %s: %v %v, want %v", pool, resp.Err(), err, kind)
		}
	}
}

func TestNoNodeProcessIsUnavailableInOneLine(t *testing.T) {
	c := Client{Socket: filepath.Join(t.TempDir(), SocketName)}
	_, err := c.Do(Request{Op: OpClaim})
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "is not reachable at "+c.Socket) {
		t.Errorf("%v", err)
	}
}

func TestListenReplacesAStaleSocketButNothingElse(t *testing.T) {
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	l.Close()
	if l, err = Listen(dir); err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	l.Close()
	os.WriteFile(SocketPath(dir), []byte("x"), 0o600)
	if _, err := Listen(dir); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("a file in the socket's place: %v", err)
	}
}

func TestPublishedPoolsComeAndGo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, ok, err := Published(dir); ok || err != nil {
		t.Fatalf("no dataDir: %v %v", ok, err)
	}
	if err := Publish(dir, Pools{Names: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	p, ok, err := Published(dir)
	if !ok || err != nil || !slices.Equal(p.Names, []string{"a", "b"}) {
		t.Fatalf("published %v %v %v", p, ok, err)
	}
	if err := Publish(dir, Pools{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := Published(dir); ok {
		t.Error("no pools, still published")
	}
}

// A pool that says how its IPs are held is published with its hold and
// families, for STATUS; one that does not, by its name alone.
func TestPublishedPoolsSayTheHoldAndFamiliesOfThoseThatHaveOne(t *testing.T) {
	dir := t.TempDir()
	var p Pools
	p.Add("edge", "route", []iprange.Family{iprange.IPv4})
	p.Add("plain", "", []iprange.Family{iprange.IPv4, iprange.IPv6})
	p.Add("v6", "address", []iprange.Family{iprange.IPv6})
	if err := Publish(dir, p); err != nil {
		t.Fatal(err)
	}
	got, ok, err := Published(dir)
	want := []HeldPool{{Name: "edge", Hold: "route", IPv4: true}, {Name: "v6", Hold: "address", IPv6: true}}
	if !ok || err != nil || !slices.Equal(got.Names, []string{"edge", "plain", "v6"}) || !slices.Equal(got.Held, want) {
		t.Errorf("published %+v (%v, %v), want names edge, plain, v6 and held %+v", got, ok, err, want)
	}
}

func TestADeferredReleaseMovesTheMarkerAndIsListedUntilDone(t *testing.T) {
	dir := t.TempDir()
	a := store.Attachment{Network: "n", ContainerID: "c1", IfName: "eth0"}
	b := store.Attachment{Network: "n", ContainerID: "c2", IfName: "eth0"}
	for _, att := range []store.Attachment{a, b} {
		if err := MarkIntent(dir, Marker{Attachment: att, Pod: Pod{Namespace: "ns", Name: "p", UID: "u"}}); err != nil {
			t.Fatal(err)
		}
	}
	// What a write killed mid-way leaves, and a file of another name.
	os.WriteFile(filepath.Join(dir, intentDir, tmpPrefix+"x"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(dir, intentDir, "other.json"), []byte(`{"attachment":{"network":"n"}}`), 0o600)
	if has, err := HasIntent(dir, a); !has || err != nil {
		t.Fatalf("HasIntent %v %v", has, err)
	}
	if err := Defer(dir, a); err != nil {
		t.Fatal(err)
	}
	if err := Defer(dir, a); err != nil {
		t.Fatalf("a second DEL's Defer: %v", err)
	}
	intents, _ := Intents(dir)
	deferred, _ := Deferred(dir)
	if len(intents) != 1 || intents[0].Attachment != b || len(deferred) != 1 || deferred[0].Attachment != a || deferred[0].Pod.UID != "u" {
		t.Fatalf("intents %v, deferred %v", intents, deferred)
	}
	if has, _ := HasIntent(dir, a); has {
		t.Error("a deferred attachment still has its intent")
	}
	if err := Released(dir, a); err != nil {
		t.Fatal(err)
	}
	if deferred, _ := Deferred(dir); len(deferred) != 0 {
		t.Errorf("deferred after Released: %v", deferred)
	}
	if err := Forget(dir, b); err != nil {
		t.Fatal(err)
	}
	if intents, _ := Intents(dir); len(intents) != 0 {
		t.Errorf("intents after Forget: %v", intents)
	}
}

// What the handler does after its answer waits until the plugin has
// closed the connection (its ADD is over), not only until it has the
// answer; with Do, which closes at once, it follows the answer.
func TestWhatFollowsTheAnswerWaitsForThePluginsClose(t *testing.T) {
	ran := make(chan struct{}, 2)
	c := serveAfter(t, func(context.Context, Request) (Response, func()) {
		return Response{Hold: "route"}, func() { ran <- struct{}{} }
	})
	resp, conn, err := c.DoThenHold(Request{Op: OpClaim, Pool: "p"})
	if err != nil || resp.Hold != "route" {
		t.Fatalf("DoThenHold: %+v %v", resp, err)
	}
	select {
	case <-ran:
		t.Fatalf("after ran while the plugin still held the connection")
	case <-time.After(300 * time.Millisecond):
	}
	conn.Close()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatalf("after did not run once the plugin closed the connection")
	}
	if _, err := c.Do(Request{Op: OpClaim, Pool: "p"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatalf("after did not run after Do")
	}
}
