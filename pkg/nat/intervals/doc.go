// Package intervals is the arithmetic of the elements of package nat's
// concatenated interval sets (the kernel's pipapo backend): an element
// is a pair of prefixes, source . destination, stored as the interval
// from both first addresses to both last ones. It says how a pair is
// laid out as an element's key and key end, reads one back, and merges
// pairs so that no two elements overlap: pipapo refuses an element that
// overlaps one it holds, and rebuilds the whole set on every change, so a
// set keyed by a few subnets costs the same with 1 or 1,000 attachments.
//
// It is pure: it sends nothing to the kernel and decides nothing about
// which pairs a table holds (packages nat and steer do).
package intervals
