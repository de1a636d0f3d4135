//go:build !faultinject && !nopark

package park

// refused is nil: only builds tagged faultinject refuse on demand.
func refused() error { return nil }
