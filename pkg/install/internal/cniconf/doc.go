// Package cniconf is libcni's configuration loading, copied verbatim from
// github.com/containernetworking/cni/libcni (the version go.mod names): how
// a runtime lists a conf dir and loads a network config, CNI 1.1 plugin
// subdirectories and symlinks included.
//
// It exists so that the installer decides which file is the primary by
// libcni's own code while the plugin binary, which shares its main package
// with the installer, does not link libcni: libcni's invocation half brings
// net/http, crypto/tls and OpenTelemetry, dozens more packages to
// initialise and megabytes more binary on every CNI call (figures:
// docs/performance.md, "Figures behind design choices"). The loading
// half copied here needs only pkg/types and pkg/version, which the plugin
// links anyway. It owns nothing on disk and writes nothing.
package cniconf
