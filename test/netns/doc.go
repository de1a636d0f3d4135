// Package netns tests the built external-ip binary the way a runtime drives
// it: exec with the CNI_* environment and the config on stdin, in a node
// network namespace that the test makes, with a veth uplink to a LAN
// namespace. It needs root and never touches the machine's own interfaces.
package netns
