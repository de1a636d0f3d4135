package assigner

import (
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/store"
)

// The kinds of error this package returns; test with errors.Is. The plugin
// maps each to a CNI error code in one place.
var (
	// ErrLockTimeout: another invocation held the lock too long (CNI 11);
	// the store's kind.
	ErrLockTimeout = store.ErrLockTimeout
	// ErrState: state on disk could not be read, written or decoded (CNI 5);
	// the store's kind.
	ErrState = store.ErrState
	// ErrRefused: the request cannot be served on this host (CNI 7); the
	// kind every floor shares.
	ErrRefused = errkind.Refused
	// ErrHost: the kernel refused a change (plugin code 100).
	ErrHost = errkind.Host
	// ErrUnreachable: a sysctl keeps the LAN from reaching the IP (plugin
	// code 102); the host adapter's kind.
	ErrUnreachable = host.ErrUnreachable
	// ErrDrift: CHECK found the host or the state not as recorded (plugin code 104).
	ErrDrift = errkind.Drift
)

// Errorf returns an error of kind (one of the Err values) whose message is
// the formatted one alone; a %w argument stays in the chain.
func Errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}
