package nodeapi

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/store"
)

// failingListener fails its first fails Accepts with err, as accept(2)
// does when the process is out of file descriptors for a moment (a burst
// of ADDs, each holding its connection until its ADD is over).
type failingListener struct {
	net.Listener
	err   error
	fails int32
	calls atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.calls.Add(1) <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: l.err}
	}
	return l.Listener.Accept()
}

func answerOne(context.Context, Request) (Response, func()) {
	return Response{Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}, nil
}

// TestServeOutlivesAFailedAccept: failed accepts for want of descriptors
// must not end the serving while the listener stays open, or every later
// claim on the node connects into the backlog and waits out its timeout.
func TestServeOutlivesAFailedAccept(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS} {
		t.Run(errno.Error(), func(t *testing.T) {
			dir := t.TempDir()
			l, err := Listen(dir)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- Serve(ctx, &failingListener{Listener: l, err: errno, fails: 3}, answerOne, quiet) }()
			defer func() { cancel(); <-served }()
			c := Client{Socket: SocketPath(dir), Timeout: 2 * time.Second}
			att := store.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
			resp, err := c.Do(Request{Op: OpClaim, Attachment: att, Pool: "p"})
			if err != nil || len(resp.Addresses) != 1 {
				t.Fatalf("claim after three accepts failed with %v: %+v %v, want an answer", errno, resp, err)
			}
		})
	}
}

// TestServeEndsWithTheErrorOfAListenerThatCannotAccept: an accept error
// that no pause cures ends Serve with ErrNotAccepting, for the node
// process to exit and be started anew, instead of leaving a socket that
// is open but never answers; the end of its context ends it with nil.
func TestServeEndsWithTheErrorOfAListenerThatCannotAccept(t *testing.T) {
	l, err := Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fl := &failingListener{Listener: l, err: syscall.EINVAL, fails: 1}
	if err := Serve(context.Background(), fl, answerOne, quiet); !errors.Is(err, ErrNotAccepting) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Serve on a listener failing with EINVAL = %v, want ErrNotAccepting wrapping EINVAL", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fl = &failingListener{Listener: l, err: syscall.EMFILE, fails: 1 << 30}
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := Serve(ctx, fl, answerOne, quiet); err != nil {
		t.Errorf("Serve whose context ended while it paused = %v, want nil", err)
	}
}
