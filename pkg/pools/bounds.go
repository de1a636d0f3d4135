package pools

// Published is what the admission policy reads of every pool whose ranges
// parse: name -> Bounds. The leader keeps it in a ConfigMap, since a
// policy sees one parameter object at a time and "no pool is named X"
// needs them all.
func (s *Set) Published() map[string]string {
	out := make(map[string]string, len(s.byAge))
	for _, p := range s.byAge {
		out[p.Name()] = p.Ranges.Bounds()
	}
	return out
}
