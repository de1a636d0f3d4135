//go:build !faultinject

package steer

// conntrackFault fails a conntrack deletion in builds tagged faultinject;
// ordinary builds compile it away.
func conntrackFault() error { return nil }
