package nodeapi

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/store"
)

// SocketName is the node process's socket in dataDir.
const SocketName = "node.sock"

// Ops of a Request.
const (
	OpClaim   = "claim"
	OpRelease = "release"
)

// Pod is who asks, from the runtime's CNI_ARGS (K8S_POD_NAMESPACE,
// K8S_POD_NAME, K8S_POD_UID: containerd and CRI-O pass all three).
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Request is one call: claim IPs for an attachment, or release what it
// holds.
type Request struct {
	Op         string           `json:"op"`
	Attachment store.Attachment `json:"attachment"`
	Pod        Pod              `json:"pod"`
	// Pool asks for a free IP of each family the pool has.
	Pool string `json:"pool,omitempty"`
	// Addresses are IPs the pod names, each to be claimed for its namespace.
	Addresses []netip.Addr `json:"addresses,omitempty"`
}

// Reasons for a refusal; each is also the reason of the Event on the pod.
const (
	ReasonUnknownPool          = "UnknownPool"
	ReasonPoolNotReady         = "PoolNotReady"
	ReasonPoolExhausted        = "PoolExhausted"
	ReasonNamespaceNotAdmitted = "NamespaceNotAdmitted"
	ReasonNodeNotAdmitted      = "NodeNotAdmitted"
	ReasonOwnedElsewhere       = "OwnedByAnotherNamespace"
	ReasonOwnedByAnotherPod    = "OwnedByAnotherPod"
	ReasonNotInAnyPool         = "NotInAnyPool"
	ReasonNoPodIdentity        = "NoPodIdentity"
)

// Response answers a Request.
type Response struct {
	// Addresses are what the attachment may hold now: the pool's, then the
	// ones it named.
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// Hold is the pool's spec.hold, "" when it has none.
	Hold string `json:"hold,omitempty"`
	// Reason and Message, when set, refuse the request: nothing is claimed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Unavailable, when set, says why the node process cannot decide now
	// (the API server did not answer): nothing new is claimed.
	Unavailable string `json:"unavailable,omitempty"`
}

// Err is the response as an error of its kind, nil when it grants.
func (r *Response) Err() error {
	switch {
	case r.Unavailable != "":
		return errorf(ErrUnavailable, "external-ip-node: %s", r.Unavailable)
	case r.Reason == ReasonPoolExhausted:
		return errorf(ErrExhausted, "%s", r.Message)
	case r.Reason != "":
		return errorf(ErrRefused, "%s", r.Message)
	}
	return nil
}
