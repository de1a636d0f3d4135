package nodeapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"time"
)

// Client asks the node process through its socket.
type Client struct {
	// Socket is the socket's path (SocketPath).
	Socket string
	// Timeout bounds a whole call. A claim may wait on the API server; the
	// node process gives up on it before this.
	Timeout time.Duration
}

// SocketPath is the socket of the node process that serves dataDir.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, SocketName) }

// DefaultTimeout is above the node process's own bound on a claim
// (ClaimTimeout), so that its answer, not our deadline, ends a call.
const DefaultTimeout = ClaimTimeout + 5*time.Second

// ClaimTimeout bounds the node process's work on one request.
const ClaimTimeout = 10 * time.Second

// Do sends req and reads the response. An error is ErrUnavailable: the
// node process is not there, or did not answer in time.
func (c Client) Do(req Request) (*Response, error) {
	resp, conn, err := c.call(req)
	if conn != nil {
		conn.Close()
	}
	return resp, err
}

// DoThenHold is Do that leaves the connection open: its close (at the
// latest the process's exit) tells the node process that the call's ADD
// is over, and what it does after the answer (Handler's after: the pod's
// annotation and event) waits until then.
func (c Client) DoThenHold(req Request) (*Response, io.Closer, error) {
	resp, conn, err := c.call(req)
	if err != nil && conn != nil {
		conn.Close()
		conn = nil
	}
	return resp, conn, err
}

func (c Client) call(req Request) (*Response, net.Conn, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	conn, err := net.DialTimeout("unix", c.Socket, timeout)
	if err != nil {
		return nil, nil, errorf(ErrUnavailable, "external-ip-node is not reachable at %s: %v", c.Socket, unwrapOp(err))
	}
	conn.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, conn, errorf(ErrUnavailable, "external-ip-node at %s: sending: %v", c.Socket, unwrapOp(err))
	}
	var resp Response
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		return nil, conn, errorf(ErrUnavailable, "external-ip-node at %s: no answer: %v", c.Socket, unwrapOp(err))
	}
	return &resp, conn, nil
}

// unwrapOp drops net.OpError's "dial unix /path:" prefix, which repeats
// the path the message already names.
func unwrapOp(err error) error {
	if op, ok := err.(*net.OpError); ok && op.Err != nil {
		return op.Err
	}
	return err
}
