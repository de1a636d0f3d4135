//go:build !faultinject

package assigner

// atStep marks a step of a change. Builds tagged faultinject replace it
// with one that can kill the process there, to prove each crash window is
// closed; ordinary builds compile it away.
func atStep(string) {}
