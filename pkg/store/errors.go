package store

import (
	"errors"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// The kinds of error the store returns; test with errors.Is. The plugin
// maps each to a CNI error code in one place.
var (
	// ErrLockTimeout: another invocation held the lock too long (CNI 11).
	ErrLockTimeout = errors.New("lock not had in time")
	// ErrState: state on disk could not be read, written or decoded (CNI 5).
	ErrState = errors.New("state error")
	// ErrRefused: the dataDir cannot be used: a system directory, or on a
	// path other users could change (CNI 7); the kind every floor shares.
	ErrRefused = errkind.Refused
)

func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}
