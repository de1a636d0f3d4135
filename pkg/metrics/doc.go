// Package metrics serves the node process's Prometheus metrics
// (`external-ip install --watch --metrics-address`): what the upkeep
// records (package upkeep's Recorder) and the plugin's invocations folded
// from the request tally (package tally).
//
// It is linked only into the node build (build tag metrics): the plugin
// starts at every CNI call and must not pay for client_golang's package
// initialisation. It owns the listening socket and nothing on the host;
// it only reads the state, through the upkeep and the tally.
package metrics
