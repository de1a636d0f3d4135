//go:build !faultinject

package forget

// conntrackStall lets a test hold a clean-up in builds tagged faultinject;
// ordinary builds compile it away.
func conntrackStall() {}
