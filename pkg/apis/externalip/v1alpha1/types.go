package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExternalIPPool is a set of external IPs that pods of the admitted
// namespaces may draw from (annotation external-ip/pool: NAME) or name
// (annotation external-ip/addresses). Cluster-scoped: only a cluster admin
// makes pools.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=eippool;eippools,categories=external-ip
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ranges",type=string,JSONPath=`.spec.ranges`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExternalIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ExternalIPPoolSpec `json:"spec"`
	// +optional
	Status ExternalIPPoolStatus `json:"status,omitempty"`
}

// ExternalIPPoolSpec is what the admin writes; its field names are the
// interface, kept stable.
type ExternalIPPoolSpec struct {
	// Ranges are the pool's IPs: each a CIDR (192.0.2.0/28, 2001:db8:1::/120)
	// or first-last (192.0.2.10-192.0.2.20), IPv4 and IPv6 alike, written
	// canonical. A pool request takes one free IP of each family the pool has.
	// Ranges may not overlap each other nor another pool's: the admission
	// policy refuses that, and the node processes give no IP from the newer
	// pool while it does.
	//
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Ranges []Range `json:"ranges"`
	// Namespaces may draw from the pool, by name; with NamespaceSelector,
	// a namespace that either admits may. With neither set no namespace
	// may: a pool for every namespace says so with namespaceSelector: {}.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	Namespaces []NamespaceName `json:"namespaces,omitempty"`
	// NamespaceSelector admits the namespaces whose labels it matches.
	//
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// NodeSelector says which nodes may hold the pool's IPs, by the
	// node's labels; unset, every node may. A pod on another node is
	// refused its IP (event NodeNotAdmitted): schedule it with a matching
	// nodeSelector or affinity.
	//
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Hold says how a node holds the pool's IPs, as the plugin's `hold`
	// key does: route (a host route and a proxy neighbour entry) or
	// address (an address on the holder device). Unset, the plugin entry's
	// own `hold` decides.
	//
	// +optional
	// +kubebuilder:validation:Enum=route;address
	Hold string `json:"hold,omitempty"`
}

// Range is a CIDR with no host bits set, or first-last with first not after
// last, both of one family, written canonical (as Go's net/netip prints
// them), so that one IP has one spelling everywhere: in a claim's name, in
// the policy's comparisons, in a user's grep. The schema checks all but
// the order of first and last: CEL has no order on IPs, and spelling them
// as comparable strings costs more than the API server's estimate allows
// a CRD. The admission policy checks the order (its cost is bounded at run
// time only), and the node processes give nothing from a pool whose range
// is reversed, saying so in its Ready condition.
//
// +kubebuilder:validation:MaxLength=81
// +kubebuilder:validation:XValidation:rule="isCIDR(self) || (self.split('-').size() == 2 && isIP(self.split('-')[0]) && isIP(self.split('-')[1]))",message="must be a CIDR such as 192.0.2.0/28 or first-last such as 192.0.2.10-192.0.2.20"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || (cidr(self) == cidr(self).masked() && ip.isCanonical(self.split('/')[0]))",message="a CIDR must have no host bits set and be written canonical, e.g. 192.0.2.0/28 or 2001:db8::/64"
// +kubebuilder:validation:XValidation:rule="isCIDR(self) || self.split('-').size() != 2 || !isIP(self.split('-')[0]) || !isIP(self.split('-')[1]) || (ip.isCanonical(self.split('-')[0]) && ip.isCanonical(self.split('-')[1]))",message="first and last must be written canonical, e.g. 2001:db8::10, not 2001:db8:0::0010"
// +kubebuilder:validation:XValidation:rule="isCIDR(self) || self.split('-').size() != 2 || !isIP(self.split('-')[0]) || !isIP(self.split('-')[1]) || ip(self.split('-')[0]).family() == ip(self.split('-')[1]).family()",message="first and last must be of one family"
type Range string

// NamespaceName is the name of a namespace (an RFC 1123 label).
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
type NamespaceName string

// ExternalIPPoolStatus is written by the node process that leads (one at
// a time, by a Lease), never by users.
type ExternalIPPoolStatus struct {
	// Size is how many IPs a pool request can be given (a CIDR's network
	// and broadcast addresses, and an IPv6 CIDR's first, are never given),
	// at most 2^63-1.
	// +optional
	Size int64 `json:"size,omitempty"`
	// Used is how many of its IPs are claimed: the claims naming the pool
	// whose IP lies inside its ranges as they are now (one an edit left
	// outside them counts no more).
	// +optional
	Used int64 `json:"used"`
	// Free is Size - Used, at least 0.
	// +optional
	Free int64 `json:"free"`
	// ObservedGeneration is the spec's generation the counts were made for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is True while the pool gives IPs; False with the
	// reason (Overlaps, Invalid) and a message that names what to change.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ExternalIPPoolList is a list of pools.
//
// +kubebuilder:object:root=true
type ExternalIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalIPPool `json:"items"`
}

// ExternalIPClaim is the one owner of one IP in the cluster, and the
// attachments that hold it. Its name is the IP (ClaimName). The node
// process makes it with create-if-absent before its node holds the IP, adds
// and removes holders, and deletes it when the last holder is gone (a
// StatefulSet's IP stays with its ordinal until the StatefulSet shrinks
// below it or goes, or its pool's ranges, edited, no longer hold it).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=eipclaim;eipclaims,categories=external-ip
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.owner.namespace`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.owner.pod.name`
// +kubebuilder:printcolumn:name="StatefulSet",type=string,JSONPath=`.spec.owner.statefulSet.name`,priority=1
// +kubebuilder:printcolumn:name="Ordinal",type=integer,JSONPath=`.spec.owner.statefulSet.ordinal`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.holders[0].node`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.spec.activeNode`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == (self.spec.address.contains(':') ? [self.spec.address.replace(':', '-')].map(n, n.startsWith('-') ? '0' + n : n).map(n, n.endsWith('-') ? n + '0' : n)[0] : self.spec.address)",message="metadata.name must be the address (IPv6: with each ':' written '-', and a leading or trailing '-' padded with '0')"
type ExternalIPClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ExternalIPClaimSpec `json:"spec"`
}

// ExternalIPClaimSpec is written by the node processes only.
//
// +kubebuilder:validation:XValidation:rule="self.address == oldSelf.address && self.pool == oldSelf.pool && self.owner == oldSelf.owner",message="address, pool and owner are immutable: a claim changes owner only by being deleted"
type ExternalIPClaimSpec struct {
	// Address is the IP, canonical.
	//
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self) && string(ip(self)) == self",message="must be an IP address written canonical"
	Address string `json:"address"`
	// Pool is the pool the IP lies in.
	//
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Owner is who the IP belongs to.
	Owner ClaimOwner `json:"owner"`
	// Holders are the attachments holding the IP now, each on its node.
	// A holder with no attachment (network, containerID and ifName empty)
	// is its pod's, claimed when the pod was scheduled to the node; the
	// pod's ADD writes its attachment in. Empty only for a StatefulSet's
	// IP kept for its ordinal between two pods.
	//
	// +optional
	// +listType=map
	// +listMapKey=network
	// +listMapKey=containerID
	// +listMapKey=ifName
	// +kubebuilder:validation:MaxItems=256
	Holders []ClaimHolder `json:"holders,omitempty"`
	// ActiveNode is the node that answers for the IP on the LAN when
	// holders on several nodes stand by (the plugin's `standby: true`):
	// the node of the first holder, then the node that last took the IP
	// over; unset once no holder is on it. When two nodes both answer for
	// the IP, the one named here keeps it and the other yields. A takeover
	// does not wait for it: the node updates it afterwards.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ActiveNode string `json:"activeNode,omitempty"`
}

// ClaimOwner is the namespace an IP belongs to and, for an IP drawn from a
// pool, the one pod or StatefulSet ordinal it was drawn for. An IP named by
// pods (external-ip/addresses) belongs to their namespace alone: its pods
// share it, another namespace's are refused.
//
// +kubebuilder:validation:XValidation:rule="!has(self.pod) || !has(self.statefulSet)",message="one of pod and statefulSet, not both"
type ClaimOwner struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Pod is the pod a pool request drew the IP for; it goes with the pod.
	// +optional
	Pod *PodRef `json:"pod,omitempty"`
	// StatefulSet is set when a StatefulSet's pod drew the IP: the next pod
	// of that ordinal gets it again, on whichever node.
	// +optional
	StatefulSet *StatefulSetRef `json:"statefulSet,omitempty"`
}

// PodRef names a pod in the owner's namespace.
type PodRef struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
}

// StatefulSetRef names a StatefulSet in the owner's namespace and one of
// its ordinals.
type StatefulSetRef struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
	// +kubebuilder:validation:Minimum=0
	Ordinal int32 `json:"ordinal"`
}

// ClaimHolder is one CNI attachment holding the IP: the node it is on and
// its pod. A DEL on that node releases it by the attachment alone, as the
// plugin works from its own records, never from DEL's arguments.
type ClaimHolder struct {
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// +kubebuilder:validation:MaxLength=36
	PodUID string `json:"podUID"`
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network"`
	// +kubebuilder:validation:MaxLength=253
	ContainerID string `json:"containerID"`
	// +kubebuilder:validation:MaxLength=15
	IfName string `json:"ifName"`
}

// ExternalIPClaimList is a list of claims.
//
// +kubebuilder:object:root=true
type ExternalIPClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalIPClaim `json:"items"`
}
