package announce

import "errors"

// The kinds of error this package returns; test with errors.Is. The plugin
// maps each to its CNI code.
var (
	// ErrAnnounce: a probe or the first round could not be sent or heard.
	ErrAnnounce = errors.New("announce error")
	// ErrConflict: another host on the LAN answered the conflict probe.
	ErrConflict = errors.New("address conflict")
)
