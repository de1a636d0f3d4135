//go:build !faultinject

package park

// refused is nil: only builds tagged faultinject refuse on demand.
func refused() error { return nil }
