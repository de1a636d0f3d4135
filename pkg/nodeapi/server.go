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
// waits for the calls under way.
func Serve(ctx context.Context, l net.Listener, h Handler, log *slog.Logger) {
	context.AfterFunc(ctx, func() { l.Close() })
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Error("node socket: accept", "error", err)
			}
			return
		}
		wg.Go(func() { serveOne(ctx, conn, h, log) })
	}
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
