package plot

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"
)

var (
	legendEntry = regexp.MustCompile(`<rect x="[\d.]+" y="34" width="12" height="12" fill="(#[0-9a-f]{6})"/><text x="[\d.]+" y="44" fill="#333">([^<]*)</text>`)
	p50Bar      = regexp.MustCompile(`<rect x="400" y="\d+" width="[\d.]+" height="16" fill="(#[0-9a-f]{6})"/>`)
)

// Every group a bar is drawn in has a legend entry of its own, in
// colours no other group has: the bench's groups (the pool rows and the
// A/B rows among them) and a group the plot does not know, which is drawn
// under its own name.
func TestEveryGroupDrawnHasALegendEntryAndColoursOfItsOwn(t *testing.T) {
	keys := []string{"reference", "external-ip", "held", "churn", "what-if", "pools", "ab", "new-group"}
	var rows []Row
	for i, k := range keys {
		rows = append(rows, Row{Name: "row of " + k, Group: k, P50: time.Duration(i+1) * time.Millisecond, P95: time.Duration(i+2) * time.Millisecond})
	}
	svg := SVG(rows, 10)
	entries := map[string]string{} // colour to label
	for _, m := range legendEntry.FindAllStringSubmatch(svg, -1) {
		if other, ok := entries[m[1]]; ok {
			t.Errorf("legend entries %q and %q share the colour %s", other, m[2], m[1])
		}
		entries[m[1]] = m[2]
	}
	if len(entries) != len(keys) {
		t.Errorf("%d legend entries (%v) for the %d groups drawn", len(entries), entries, len(keys))
	}
	bars := p50Bar.FindAllStringSubmatch(svg, -1)
	if len(bars) != 2*len(rows) {
		t.Fatalf("%d bars for %d rows: the pattern misses them", len(bars), len(rows))
	}
	lights := map[string]string{}
	for i, k := range keys {
		solid, light := bars[2*i+1][1], bars[2*i][1]
		if _, ok := entries[solid]; !ok {
			t.Errorf("group %q is drawn in %s, which no legend entry has", k, solid)
		}
		if other, ok := lights[light]; ok {
			t.Errorf("groups %q and %q share the light colour %s", other, k, light)
		}
		lights[light] = k
	}
	if !slices.Contains(slices.Collect(maps.Values(entries)), "new-group") {
		t.Errorf("a group the plot lacks has no legend entry under its own name: %v", entries)
	}
}

// The legend names the groups of the rows drawn, and no other: a
// -pools-only run's plot has no churn entry.
func TestTheLegendNamesOnlyTheGroupsDrawn(t *testing.T) {
	svg := SVG([]Row{{Name: "a", Group: "reference", P50: time.Millisecond, P95: 2 * time.Millisecond}, {Name: "b", Group: "pools", P50: time.Millisecond, P95: 2 * time.Millisecond}}, 10)
	var labels []string
	for _, m := range legendEntry.FindAllStringSubmatch(svg, -1) {
		labels = append(labels, m[2])
	}
	if want := []string{"reference plugins", "pools"}; fmt.Sprint(labels) != fmt.Sprint(want) {
		t.Errorf("legend %q, want %q", labels, want)
	}
}
