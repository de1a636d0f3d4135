package traffic

// Mode says which of an external IP's flows are steered to and from the
// containers that hold it.
type Mode string

// The values of the `traffic` key.
const (
	// Both DNATs flows to the external IP to the containers and SNATs
	// their flows out of the IP's uplink to it.
	Both Mode = "both"
	// Ingress only DNATs flows to the external IP.
	Ingress Mode = "ingress"
	// Egress only SNATs the containers' outbound flows.
	Egress Mode = "egress"
	// None steers nothing: the node holds the IP, and something else
	// (kube-proxy's Service externalIPs, for one) may steer it.
	None Mode = "none"
)

// Ingress tells whether flows to the external IP go to the containers.
func (t Mode) Ingress() bool { return t == Both || t == Ingress }

// Egress tells whether the containers' outbound flows leave from the IP.
func (t Mode) Egress() bool { return t == Both || t == Egress }

// Steers tells whether t makes any rule; the empty mode makes none.
func (t Mode) Steers() bool { return t.Ingress() || t.Egress() }
