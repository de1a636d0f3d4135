package main

import "github.com/external-ip/external-ip/test/bench/plot"

// svg is the plot (package plot) of every row but the standby rows, whose
// hundreds of ms would flatten the rest; the tables carry them.
func (r *results) svg(n int) string {
	var rows []plot.Row
	for _, s := range r.rows {
		if s.group != "standby" {
			rows = append(rows, plot.Row{Name: s.name, Group: s.group, P50: p(s, 50), P95: p(s, 95)})
		}
	}
	return plot.SVG(rows, n)
}
