//go:build !faultinject && !nopark

package sink

// refused is nil: only builds tagged faultinject refuse on demand.
func refused() error { return nil }
