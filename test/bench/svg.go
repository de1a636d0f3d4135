package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Geometry of the plot.
const (
	svgWidth  = 960
	svgLabelW = 360
	svgRowH   = 22
	svgTop    = 76
	svgConcH  = 360
)

// canvas is the SVG being drawn.
type canvas struct{ strings.Builder }

func (c *canvas) w(format string, args ...any) { fmt.Fprintf(c, format, args...) }

// svg draws p50 and p95 bars per scenario and the concurrency curve, by
// hand, so the benchmark needs no plotting module.
func (r *results) svg() string {
	var c canvas
	barsH := svgTop + len(r.rows)*svgRowH + 40
	height := barsH
	if len(r.conc) > 0 {
		height += svgConcH
	}
	c.w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	c.w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	c.w(`<text x="%d" y="24" font-size="16" font-weight="bold">external-ip: wall time of one invocation (p50 solid, p95 light), %d iterations</text>`+"\n", 10, r.n)
	legend(&c)
	r.bars(&c)
	if len(r.conc) > 0 {
		r.concPlot(&c, barsH, height)
	}
	c.w("</svg>\n")
	return c.String()
}

func legend(c *canvas) {
	lx := 10.0
	for _, g := range []struct{ name, label string }{{"reference", "reference plugins"}, {"external-ip", "external-ip, empty node"}, {"held", "addresses held"}, {"what-if", "one setting changed"}} {
		c.w(`<rect x="%.1f" y="34" width="12" height="12" fill="%s"/><text x="%.1f" y="44" fill="#333">%s</text>`+"\n", lx, colorsOf(g.name)[0], lx+16, g.label)
		lx += 40 + 7*float64(len(g.label))
	}
}

// barScale is the x scale of the bars: it stops at the slowest row that is
// not a deliberate wait, so that the 150 ms probe does not flatten the
// rest; longer bars are cut.
func (r *results) barScale() (time.Duration, func(time.Duration) float64) {
	var scaleMax time.Duration
	for _, s := range r.rows {
		if !strings.Contains(s.name, "conflictProbe") {
			scaleMax = max(scaleMax, p(s, 95))
		}
	}
	scaleMax = time.Duration(float64(scaleMax) * 1.08)
	if scaleMax == 0 {
		scaleMax = time.Millisecond
	}
	plotW := float64(svgWidth - svgLabelW - 130)
	return scaleMax, func(d time.Duration) float64 {
		return float64(svgLabelW) + plotW*math.Min(1, float64(d)/float64(scaleMax))
	}
}

func (r *results) bars(c *canvas) {
	scaleMax, x := r.barScale()
	step := niceStep(scaleMax)
	for t := time.Duration(0); t <= scaleMax; t += step {
		gx := x(t)
		c.w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>`+"\n", gx, svgTop-6, gx, svgTop+len(r.rows)*svgRowH)
		c.w(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", gx, svgTop-10, strings.TrimSuffix(fmt.Sprintf("%.1f", float64(t)/1e6), ".0")+" ms")
	}
	for i, s := range r.rows {
		bar(c, svgTop+i*svgRowH, s, scaleMax, x)
	}
}

// bar is one row: name, p95 and p50 bars, and their values.
func bar(c *canvas, y int, s *series, scaleMax time.Duration, x func(time.Duration) float64) {
	col := colorsOf(s.group)
	c.w(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLabelW-8, y+15, xmlEscape(s.name))
	p50, p95 := p(s, 50), p(s, 95)
	c.w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", svgLabelW, y+3, x(p95)-svgLabelW, svgRowH-6, col[1])
	c.w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", svgLabelW, y+3, x(p50)-svgLabelW, svgRowH-6, col[0])
	label := fmt.Sprintf("%.2f / %.2f", float64(p50)/1e6, float64(p95)/1e6)
	if p95 > scaleMax {
		c.w(`<text x="%.1f" y="%d" font-weight="bold" fill="white">//</text>`+"\n", x(p95)-16, y+15)
	}
	c.w(`<text x="%.1f" y="%d" fill="#333">%s</text>`+"\n", x(p95)+4, y+15, label)
}

// concAxes maps the concurrency plot: K evenly spaced, time on a log scale
// (K spans 1 to 64, and a straight line means time proportional to K).
type concAxes struct {
	left, right, top, bottom float64
	lo, hi                   float64 // ms
	n                        int
}

func (a concAxes) x(i int) float64 {
	if a.n == 1 {
		return a.left
	}
	return a.left + (a.right-a.left)*float64(i)/float64(a.n-1)
}

func (a concAxes) y(d time.Duration) float64 {
	v := math.Max(float64(d)/1e6, a.lo)
	return a.bottom - (a.bottom-a.top)*(math.Log10(v)-math.Log10(a.lo))/(math.Log10(a.hi)-math.Log10(a.lo))
}

// concPlot is the total wall time of K ADDs, serial and concurrent.
func (r *results) concPlot(c *canvas, y0, height int) {
	c.w(`<text x="10" y="%d" font-size="16" font-weight="bold">K ADDs: total wall time, serial against concurrent (median)</text>`+"\n", y0+20)
	ymin, ymax := time.Duration(math.MaxInt64), time.Duration(0)
	for _, cr := range r.conc {
		for _, d := range []time.Duration{median(cr.serial), median(cr.concurrent)} {
			ymin, ymax = min(ymin, d), max(ymax, d)
		}
	}
	a := concAxes{left: 80, right: float64(svgWidth - 120), top: float64(y0 + 50), bottom: float64(height - 40),
		lo: niceBound(float64(ymin)/1e6, false), hi: niceBound(float64(ymax)/1e6, true), n: len(r.conc)}
	concGrid(c, a)
	for i, cr := range r.conc {
		c.w(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">K=%d</text>`+"\n", a.x(i), a.bottom+18, cr.k)
	}
	r.concLine(c, a, func(cr concRow) time.Duration { return median(cr.serial) }, "#c0392b", "K serial ADDs", a.top+4)
	r.concLine(c, a, func(cr concRow) time.Duration { return median(cr.concurrent) }, "#1f8a4c", "K concurrent ADDs", a.top+22)
	for i, cr := range r.conc {
		label := ratio(median(cr.concurrent), median(cr.serial)) + "x"
		if cr.fails > 0 {
			label += fmt.Sprintf(", %d failed", cr.fails)
		}
		// Beside the concurrent point, on the side away from the serial line.
		ly := a.y(median(cr.concurrent)) - 8
		if median(cr.concurrent) < median(cr.serial) && ly+22 < a.bottom-4 {
			ly += 22
		}
		c.w(`<text x="%.1f" y="%.1f" text-anchor="start" fill="#1f8a4c" font-size="11">%s</text>`+"\n", a.x(i)+6, ly, label)
	}
	c.w(`<text x="%.1f" y="%.1f" fill="#555" font-size="11">labels: concurrent / serial; log scale</text>`+"\n", a.left+200, a.top+4)
}

// concGrid draws the log scale's lines at 1, 2 and 5 times powers of ten.
func concGrid(c *canvas, a concAxes) {
	for dec := math.Pow(10, math.Floor(math.Log10(a.lo))); dec <= a.hi*1.0001; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := dec * m
			if v > a.hi*1.0001 {
				break
			}
			if v < a.lo*0.9999 {
				continue
			}
			d := time.Duration(v * 1e6)
			stroke := "#f0f0f0"
			if m == 1 {
				stroke = "#d8d8d8"
			}
			c.w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", a.left, a.y(d), a.right, a.y(d), stroke)
			c.w(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%g ms</text>`+"\n", a.left-6, a.y(d)+4, v)
		}
	}
}

func (r *results) concLine(c *canvas, a concAxes, get func(concRow) time.Duration, color, name string, ly float64) {
	var pts []string
	for i, cr := range r.conc {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", a.x(i), a.y(get(cr))))
	}
	c.w(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
	for i, cr := range r.conc {
		c.w(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", a.x(i), a.y(get(cr)), color)
	}
	c.w(`<rect x="%.1f" y="%.1f" width="14" height="4" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", a.left+20, ly-4, color, a.left+40, ly, name)
}

// niceBound is the 1, 2 or 5 times a power of ten just below v (or just
// above, when up), for the ends of a log axis.
func niceBound(v float64, up bool) float64 {
	dec := math.Pow(10, math.Floor(math.Log10(v)))
	if !up {
		for _, m := range []float64{5, 2, 1} {
			if m*dec <= v {
				return m * dec
			}
		}
		return dec
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*dec >= v {
			return m * dec
		}
	}
	return 10 * dec
}

// colorsOf is the solid (p50) and light (p95) colour of a group of rows.
func colorsOf(group string) [2]string {
	switch group {
	case "reference":
		return [2]string{"#6b6b6b", "#cfcfcf"}
	case "held":
		return [2]string{"#6a3d9a", "#cab2d6"}
	case "what-if":
		return [2]string{"#c2660a", "#fdd0a2"}
	}
	return [2]string{"#1f5fa8", "#a9c6ea"}
}

// niceStep picks a grid step of 1, 2 or 5 times a power of ten giving
// about five lines.
func niceStep(max time.Duration) time.Duration {
	raw := float64(max) / 5
	if raw <= 0 {
		return time.Millisecond
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return time.Duration(m * mag)
		}
	}
	return time.Duration(10 * mag)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
