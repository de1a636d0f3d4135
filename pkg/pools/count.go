package pools

// Count is one pool's numbers, for its status and the metrics.
type Count struct {
	Pool       string
	Size, Used int64
}

// Free is what is left, at least 0.
func (c Count) Free() int64 { return max(c.Size-c.Used, 0) }
