// Package upkeep is the node's optional periodic work, run by
// `external-ip install --watch` beside the CNI path and never needed by it:
// re-announcing every held IP on the uplink it was announced on, and
// repairing drift between the state and the kernel as `external-ip repair`
// does, under the state lock.
//
// It reads the plugin's state through package assigner and sends through
// package announce; it owns no file, device or rule of its own. What it
// changes on the host is what `external-ip repair` would change.
package upkeep
