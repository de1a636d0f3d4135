package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Handler answers one request; ctx ends at ClaimTimeout. after, when not
// nil, runs once the plugin has closed the connection (DoThenHold: its
// call is over), or at the connection's deadline: what the node process
// does there (an API server write or two, their echo through its watches)
// then does not compete for the node's CPU with the plugin's holding of
// the IPs it was just given.
type Handler func(ctx context.Context, req Request) (resp Response, after func())

// Listen opens the socket of dataDir for the node process: a socket left
// by an earlier process is replaced, anything else there is refused. The
// socket is root's alone (0600; dataDir itself is 0700, so it is never open
// to others, not even before the chmod), as the plugin runs as root.
func Listen(dataDir string) (net.Listener, error) {
	path := SocketPath(dataDir)
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s: exists and is not a socket; not replacing it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers each connection's one request with h until ctx ends, and
// waits for the calls under way. It returns nil once ctx has ended, or the
// error that left the listener unable to accept: the caller must make that
// seen (the node process exits, to be started anew), since a listener
// left open but never accepting makes every plugin that asks wait out its
// timeout.
func Serve(ctx context.Context, l net.Listener, h Handler, log *slog.Logger) error {
	context.AfterFunc(ctx, func() { l.Close() })
	var wg sync.WaitGroup
	defer wg.Wait()
	var pause time.Duration
	for {
		conn, err := l.Accept()
		if err == nil {
			pause = 0
			wg.Go(func() { serveOne(ctx, conn, h, log) })
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if !shortOfResources(err) {
			return fmt.Errorf("%w: accept: %w", ErrNotAccepting, err)
		}
		pause = nextPause(pause)
		log.Warn("node socket: accept failed; retrying", "error", err, "in", pause.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// shortOfResources tells the accept errors that last only while the
// process or the kernel is short of file descriptors or memory (a burst of
// ADDs, each holding its connection until it is over): net/http's Server
// retries them after a pause, and so does Serve. Go's accept already
// retries an interrupted call and a connection aborted in the backlog.
func shortOfResources(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// nextPause doubles the pause after each failed accept in a row, from 5 ms
// up to a second, as net/http's Server does: soon enough once a
// descriptor is free, and no busy loop while none is.
func nextPause(p time.Duration) time.Duration {
	return min(max(2*p, 5*time.Millisecond), time.Second)
}

func serveOne(ctx context.Context, conn net.Conn, h Handler, log *slog.Logger) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(ClaimTimeout + time.Second))
	var req Request
	if err := json.NewDecoder(conn).Decode(&req); err != nil {
		log.Warn("node socket: unreadable request", "error", err)
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, ClaimTimeout)
	resp, after := h(callCtx, req)
	cancel()
	if err := json.NewEncoder(conn).Encode(resp); err != nil {
		log.Warn("node socket: the plugin left before the answer", "op", req.Op, "attachment", req.Attachment.String(), "error", err)
	}
	if after != nil {
		// Until the plugin's close (its exit), the deadline, or our end.
		stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
		io.Copy(io.Discard, conn)
		stop()
		after()
	}
}
