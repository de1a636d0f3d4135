package v1alpha1

import (
	"fmt"
	"net/netip"
	"strings"
)

// The keys that pods, claims and the admission policy share.
const (
	// AnnotationPool asks for a free IP of the named pool (one per family
	// the pool has).
	AnnotationPool = "external-ip/pool"
	// AnnotationAddresses names IPs, comma-separated: the plugin's default
	// podAnnotation. With pools defined, each must lie in a pool that admits
	// the pod's namespace.
	AnnotationAddresses = "external-ip/addresses"
	// AnnotationAssigned is written by the node process on the pod: the IPs
	// it was given, comma-separated.
	AnnotationAssigned = "external-ip/assigned"
	// LabelHolder marks a pod that holds a claimed IP, so that the leader
	// watches those pods only.
	LabelHolder = "external-ip.io/holder"
	// LabelPool and LabelNamespace on a claim name its pool and its owner's
	// namespace, for selectors (kubectl get eipclaims -l ...).
	LabelPool      = "external-ip.io/pool"
	LabelNamespace = "external-ip.io/namespace"
)

// ClaimName is the name of the claim of ip: its canonical text, with an
// IPv6 address's colons written as dashes (a name must be a DNS subdomain)
// and a dash at either end padded with a 0 ("2001:db8::" is "2001-db8--0"),
// so that every IP has one name and every name one IP.
func ClaimName(ip netip.Addr) string {
	s := ip.Unmap().String()
	if !ip.Is6() || ip.Is4In6() {
		return s
	}
	n := strings.ReplaceAll(s, ":", "-")
	if strings.HasPrefix(n, "-") {
		n = "0" + n
	}
	if strings.HasSuffix(n, "-") {
		n += "0"
	}
	return n
}

// ParseClaimName is the IP a claim's name stands for.
func ParseClaimName(name string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(strings.ReplaceAll(name, "-", ":"))
	if err != nil || ClaimName(ip) != name {
		return netip.Addr{}, fmt.Errorf("claim name %q does not name an IP", name)
	}
	return ip, nil
}
