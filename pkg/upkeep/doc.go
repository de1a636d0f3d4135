// Package upkeep is the node's optional work, run by `external-ip install
// --watch` beside the CNI path and never needed by it:
//
//   - re-announcing every held IP on the uplink it was announced on;
//   - repairing drift between the state and the kernel as `external-ip
//     repair` does, under the state lock: addresses, NAT, and the routing
//     of uplinks that are not the default route's (with the plugin
//     entry's uplinkRouting, where `repair` takes the node's recorded
//     one, and the reloaded entry's from its reload on, see Use); at its
//     period, and at
//     once when an uplink of a held IP comes up again (the node's link
//     events, through LinkFunc), since going down flushed its proxy
//     entries;
//   - watching each uplink that holds an IP for another host claiming one
//     (ARP with our IP as sender, a neighbour advertisement for it, from a
//     MAC that is not the node's), logging each episode once and defending
//     the IP as RFC 5227 section 2.4 (b) says.
//
// It reads the plugin's state through package assigner and sends through
// package announce; it owns no file, device or rule of its own, and changes
// on the host only what `external-ip repair` would change. The sockets it
// listens on come through ListenFunc, so that the conflict logic is tested
// without root. What it does and sees goes to a Recorder (package metrics
// in the node build); it never imports client_golang itself, since the
// plugin's binary links this package.
package upkeep
