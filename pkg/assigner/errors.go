package assigner

import (
	"errors"
	"fmt"
)

// The kinds of error this package returns; test with errors.Is. The plugin
// maps each to a CNI error code in one place.
var (
	// ErrLockTimeout: another invocation held the lock too long (CNI 11).
	ErrLockTimeout = errors.New("lock not had in time")
	// ErrState: state on disk could not be read, written or decoded (CNI 5).
	ErrState = errors.New("state error")
	// ErrRefused: the request cannot be served on this host (CNI 7).
	ErrRefused = errors.New("refused")
	// ErrHost: the kernel refused a change (plugin code 100).
	ErrHost = errors.New("host error")
	// ErrUnreachable: a sysctl keeps the LAN from reaching the IP (plugin code 102).
	ErrUnreachable = errors.New("unreachable")
	// ErrConflict: another host on the LAN answered for the IP (plugin code 103).
	ErrConflict = errors.New("address conflict")
	// ErrDrift: CHECK found the host or the state not as recorded (plugin code 104).
	ErrDrift = errors.New("drift")
	// ErrAnnounce: the first round of announcements could not be sent (plugin code 101).
	ErrAnnounce = errors.New("announce error")
)

// errUnmarked is the refusal of a dummy or port-less bridge without our
// alias: a device that another invocation may be making right now, between
// its creation and its marking, so only a check under the lock is final.
var errUnmarked = errors.New("not marked")

// kindError carries a kind for errors.Is while its message stays the one
// line that names the object and the value.
type kindError struct {
	kind error
	msg  string
	err  error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}

// Errorf returns an error of kind (one of the Err values) whose message is
// the formatted one alone; a %w argument stays in the chain. The plugin's
// hooks use it too, so that their errors map to codes as the assigner's do.
func Errorf(kind error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &kindError{kind: kind, msg: err.Error(), err: errors.Unwrap(err)}
}

// aboutIP prefixes err's message with the IP it concerns, keeping its kind,
// so that the plugin can say which request the IP came from.
func aboutIP(ip fmt.Stringer, err error) error {
	var ke *kindError
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	return &kindError{kind: ke.kind, msg: ip.String() + ": " + ke.msg, err: ke.err}
}
