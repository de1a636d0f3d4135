package config

import "github.com/containernetworking/cni/pkg/version"

// PluginVersions are the CNI versions the plugin speaks: from 0.3.0, where
// chaining and prevResult begin. The plugin hands them to skel, which
// refuses every other; the installer chains only into a list of one of
// them, or every pod of the node would fail.
func PluginVersions() version.PluginInfo {
	return version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
}
