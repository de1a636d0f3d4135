package localpool

import (
	"errors"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// The kinds of error this package returns; the plugin maps each to a CNI
// code.
var (
	// ErrExhausted: the pool has no free IP of a family it gives (the
	// plugin's code 105, as for the cluster's pools).
	ErrExhausted = errors.New("pool exhausted")
	// ErrOwned: an IP the ADD names belongs to another owner (CNI code 7).
	ErrOwned = errors.New("owned by another owner")
	// ErrTaken: an IP chosen free was taken by another ADD before this
	// one's lock; the plugin chooses again, and past its tries says try
	// again later (CNI code 11).
	ErrTaken = errors.New("taken meanwhile")
	// ErrInUse: another host on the LAN answered the conflict probe for an
	// IP given from the pool; the plugin passes over it and chooses again,
	// and past its tries refuses as for any conflict (its code 103).
	ErrInUse = errors.New("in use on the LAN")
)

func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}
