// Package plot draws the bench's figure: a bar of each row's p50 and of
// its p95, coloured by the row's group, under a legend of the groups, as
// SVG written by hand so that the bench needs no plotting module.
//
// It is pure: rows in, SVG text out. Which rows are drawn, and their
// figures, are the bench's; how a group looks is the plot's, and the
// legend names every group a bar is drawn in.
package plot
