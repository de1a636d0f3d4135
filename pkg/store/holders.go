package store

import "slices"

// WithHolder returns an index entry's holders (or standby holders) with
// key added or removed, sorted, and whether that changed them: the
// reference count a change applies; the list given is never changed in
// place.
func WithHolder(holders []string, key string, hold bool) ([]string, bool) {
	i, found := slices.BinarySearch(holders, key)
	switch {
	case hold && !found:
		return slices.Insert(slices.Clone(holders), i, key), true
	case !hold && found:
		return slices.Delete(slices.Clone(holders), i, i+1), true
	}
	return holders, false
}
