package nodeapi

import (
	"errors"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// The kinds of error the client returns; the plugin maps each to a CNI code.
var (
	// ErrUnavailable: the node process or the API server could not answer
	// now; the kubelet's retry may succeed (CNI code 11).
	ErrUnavailable = errors.New("node process unavailable")
	// ErrRefused: the cluster's pools or claims refuse the request (CNI
	// code 7): an unknown pool, a namespace or node the pool does not
	// admit, an IP owned by another namespace or in no pool.
	ErrRefused = errors.New("refused by the cluster's pools")
	// ErrExhausted: the pool has no free IP (the plugin's code 105).
	ErrExhausted = errors.New("pool exhausted")
	// ErrFiles: a file under dataDir/claims could not be read or written
	// (CNI code 5).
	ErrFiles = errors.New("claims state error")
	// ErrNotAccepting: the node socket can no longer accept (Serve's
	// error); the node process must be started anew to listen again.
	ErrNotAccepting = errors.New("node socket not accepting")
)

func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}
