package host

// CarriesLost says whether the holder, marked for this very dataDir (one
// marked the old way may carry another dataDir's), carries addresses or
// routes while its state directory, dir, is gone: GC and repair then make
// the directory again and, finding no record, remove them all.
func (h *Holder) CarriesLost(dir string) (bool, error) {
	l, err := h.Look()
	if err != nil || l.Index == 0 || !h.OwnedBy(l.Alias) {
		return false, err
	}
	if _, err := h.Judge(l); err != nil {
		return false, nil // not ours after all (a bridge with ports): nothing to do
	}
	addrs, err := h.k.HolderAddrs(l.Index)
	if err != nil {
		return false, err
	}
	routes, err := h.k.HolderRoutes(l.Index)
	if err != nil || len(addrs)+len(routes) == 0 {
		return false, err
	}
	h.Log.Warn("state directory lost while the holder carries addresses or routes; releasing them", "dir", dir, "addresses", len(addrs), "routes", len(routes))
	return true, nil
}
