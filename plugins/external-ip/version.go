package main

import (
	"cmp"
	"runtime/debug"
)

// buildVersion and buildRevision are set by the Makefile (-ldflags -X) from
// git describe and rev-parse; a plain go build leaves them to the build info.
var buildVersion, buildRevision string

// versionLine is "external-ip VERSION (revision REV)", from the link-time
// version or the build info, with the VCS revision the toolchain recorded.
func versionLine() string {
	v, rev := versionParts()
	return "external-ip " + v + " (revision " + rev + ")"
}

// versionParts are the version and the revision, for versionLine and for
// the build_info metric.
func versionParts() (string, string) {
	v, rev, dirty := buildVersion, buildRevision, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = cmp.Or(rev, s.Value)
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	v, rev = cmp.Or(v, "(devel)"), cmp.Or(rev, "unknown")
	if dirty {
		rev += ", modified"
	}
	return v, rev
}
