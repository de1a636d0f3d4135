// Package slots names the numbers the uplink routing uses (package
// uplinkroute makes the rules and tables, package nat the marks): each
// routed uplink has a slot s, and slot s is the value s in the mark bits,
// the routing table Table+s and a rule at Priority+1. It is a leaf, so
// that package config parses the uplinkRouting key without linking the
// kernel's libraries. It owns no state and touches nothing.
package slots
