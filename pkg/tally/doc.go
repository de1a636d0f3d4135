// Package tally counts the plugin's invocations on a node for the node
// process's metrics, at the cost of one small write per invocation.
//
// The plugin is a short-lived process: it cannot keep a counter, and a
// counter file rewritten under a lock would cost each call a lock and a
// read-modify-write. Instead each invocation appends one line, "VERB CODE",
// to dataDir/cni-requests with a single O_APPEND write, and the node process
// folds the new lines into its counters. A call that crashes loses its own
// line and nothing else: every other line is already whole on disk.
//
// It owns dataDir/cni-requests alone. The file is created by the node
// process (a Folder), never by the plugin: on a node where nobody folds, the
// plugin's open fails and nothing grows. Neither side follows a symlink in
// dataDir, and the plugin never blocks on a file that is not a regular one.
package tally
