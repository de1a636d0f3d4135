package errkind

import "errors"

// The kinds that packages on several floors produce: the store refuses a
// dataDir, the host adapter an uplink, the assigner an IP, and each means
// the same to the runtime. Each package re-exports those it returns under
// its own Err names, so that a caller tests errors.Is against the package
// it called; the plugin maps each kind to its CNI code once.
var (
	// Refused: the request cannot be served on this host (CNI code 7).
	Refused = errors.New("refused")
	// Host: the kernel refused a change (plugin code 100).
	Host = errors.New("host error")
	// Drift: CHECK found the host or the state not as recorded (plugin
	// code 104).
	Drift = errors.New("drift")
)
