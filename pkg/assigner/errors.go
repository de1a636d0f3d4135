package assigner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/external-ip/external-ip/pkg/errkind"
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
	// store's kind, which it returns for a dataDir it refuses.
	ErrRefused = store.ErrRefused
	// ErrHost: the kernel refused a change (plugin code 100).
	ErrHost = errors.New("host error")
	// ErrUnreachable: a sysctl keeps the LAN from reaching the IP (plugin code 102).
	ErrUnreachable = errors.New("unreachable")
	// ErrDrift: CHECK found the host or the state not as recorded (plugin code 104).
	ErrDrift = errors.New("drift")
)

// Errorf returns an error of kind (one of the Err values) whose message is
// the formatted one alone; a %w argument stays in the chain.
func Errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// aboutIP prefixes err's message with the IP it concerns, keeping its kind,
// so that the plugin can say which request the IP came from.
func aboutIP(ip fmt.Stringer, err error) error {
	// An error already about ip (an uplink chosen for it) keeps one prefix.
	if err == nil || strings.HasPrefix(err.Error(), ip.String()+": ") {
		return err
	}
	return errkind.Prefix(ip.String(), err)
}
