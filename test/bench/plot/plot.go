package plot

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Row is one bar: a row's name, its group and its percentiles.
type Row struct {
	Name, Group string
	P50, P95    time.Duration
}

// Geometry of the plot.
const (
	width  = 1000
	labelW = 400
	rowH   = 22
	top    = 76
)

// SVG draws a p50 and a p95 bar per row, in the rows' order; n is the
// iterations, for the title.
func SVG(rows []Row, n int) string {
	var c strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&c, format, args...) }
	height := top + len(rows)*rowH + 20
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w(`<text x="10" y="24" font-size="16" font-weight="bold">wall time of one invocation in ms, p50 (solid) / p95 (light), %d interleaved iterations</text>`+"\n", n)
	lx := 10.0
	for _, g := range legend(rows) {
		w(`<rect x="%.0f" y="34" width="12" height="12" fill="%s"/><text x="%.0f" y="44" fill="#333">%s</text>`+"\n", lx, g.solid, lx+16, xmlEscape(g.label))
		lx += 40 + 7*float64(len(g.label))
	}
	var most time.Duration
	for _, r := range rows {
		most = max(most, r.P95)
	}
	most = max(time.Duration(float64(most)*1.08), time.Millisecond)
	plotW := float64(width - labelW - 120)
	x := func(d time.Duration) float64 { return labelW + plotW*float64(d)/float64(most) }
	step := niceStep(most)
	for t := time.Duration(0); t <= most; t += step {
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>`+"\n", x(t), top-6, x(t), top+len(rows)*rowH)
		w(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%g ms</text>`+"\n", x(t), top-10, float64(t)/1e6)
	}
	for i, r := range rows {
		y, g := top+i*rowH, groupOf(r.Group)
		w(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+15, xmlEscape(r.Name))
		w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, x(r.P95)-labelW, rowH-6, g.light)
		w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, x(r.P50)-labelW, rowH-6, g.solid)
		w(`<text x="%.1f" y="%d" fill="#333">%.2f / %.2f</text>`+"\n", x(r.P95)+4, y+15, float64(r.P50)/1e6, float64(r.P95)/1e6)
	}
	w("</svg>\n")
	return c.String()
}

// group is how a group of rows looks: its legend's label, its solid
// (p50) and its light (p95) colour.
type group struct{ key, label, solid, light string }

// groups are the bench's groups of rows, in the legend's order (the
// standby rows are never drawn).
var groups = []group{
	{"reference", "reference plugins", "#6b6b6b", "#cfcfcf"},
	{"external-ip", "external-ip, empty node", "#1f5fa8", "#a9c6ea"},
	{"held", "attachments held", "#6a3d9a", "#cab2d6"},
	{"churn", "churn", "#1a7f4e", "#a6dcbf"},
	{"what-if", "other builds", "#c2660a", "#fdd0a2"},
	{"pools", "pools", "#00838f", "#a5dde2"},
	{"ab", "A/B builds (-ab)", "#b2182b", "#f4a6a6"},
}

// groupOf is how the group named key looks: one the table lacks is drawn
// in black under its own name, never in another group's colours.
func groupOf(key string) group {
	for _, g := range groups {
		if g.key == key {
			return g
		}
	}
	return group{key, key, "#222222", "#b0b0b0"}
}

// legend is the groups of rows, each once: the table's in its order,
// then any other in the rows' order. Every bar's colour is in it.
func legend(rows []Row) []group {
	drawn := map[string]bool{}
	for _, r := range rows {
		drawn[r.Group] = true
	}
	var out []group
	for _, g := range groups {
		if drawn[g.key] {
			out, drawn[g.key] = append(out, g), false
		}
	}
	for _, r := range rows {
		if drawn[r.Group] {
			out, drawn[r.Group] = append(out, groupOf(r.Group)), false
		}
	}
	return out
}

// niceStep is a grid step of 1, 2 or 5 times a power of ten giving about
// five lines.
func niceStep(most time.Duration) time.Duration {
	raw := float64(most) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return time.Duration(m * mag)
		}
	}
	return time.Duration(10 * mag)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
