package nat

// Traffic says which of an external IP's flows are steered to and from the
// containers that hold it: the `traffic` key of the network config, and
// what an attachment's record keeps of it. It lives here, with the rules
// it selects, because both package config (which parses it) and package
// assigner (which decides the rules) import this package, and neither
// imports the other.
type Traffic string

// The values of the `traffic` key.
const (
	// TrafficBoth DNATs flows to the external IP to the containers and SNATs
	// their flows out of the IP's uplink to it.
	TrafficBoth Traffic = "both"
	// TrafficIngress only DNATs flows to the external IP.
	TrafficIngress Traffic = "ingress"
	// TrafficEgress only SNATs the containers' outbound flows.
	TrafficEgress Traffic = "egress"
	// TrafficNone steers nothing: the node holds the IP, and something else
	// (kube-proxy's Service externalIPs, for one) may steer it.
	TrafficNone Traffic = "none"
)

// Ingress tells whether flows to the external IP go to the containers.
func (t Traffic) Ingress() bool { return t == TrafficBoth || t == TrafficIngress }

// Egress tells whether the containers' outbound flows leave from the IP.
func (t Traffic) Egress() bool { return t == TrafficBoth || t == TrafficEgress }

// Steers tells whether t makes any rule; the empty mode makes none.
func (t Traffic) Steers() bool { return t.Ingress() || t.Egress() }
